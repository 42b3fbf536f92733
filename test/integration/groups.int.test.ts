/**
 * Groups (issue 15): sequential members run one after another across queues, a failure stops,
 * skips or lets the rest go on as on_failure says, parallel members run together, the group's
 * status is seed 003's derivation recorded on the sys partition, cancelling a group cancels its
 * live members, a resent create makes nothing twice, and a restart in the middle goes on.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, eventually, fail, untilJob, untilRetryOf } from '../support/worker-helpers.js';
import { commitSeqOf, indexOf } from '../../machines/index.js';
import { explainJob } from '../../src/cli/audit-commands.js';
import { closeTestFile, connectTestClients, openResources, request, startTrackedNode, uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let dataDir: string;

beforeAll(async () => {
  server = await startNatsServer();
  dataDir = await mkdtemp(join(tmpdir(), 'docket-groups-'));
  node = await startTrackedNode(server, { nodeName: 'groups', dataDir });
  ({ client, nc } = await connectTestClients(server, 'groups-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
  await rm(dataDir, { recursive: true, force: true });
});

afterEach(() => {
  expect(openResources()).toHaveLength(1);
});

function ok(reply: Awaited<ReturnType<typeof request>>): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

interface GroupReply {
  readonly status: string;
  readonly members: { job_id: string; status: string }[];
}

const group = async (id: string) => ok(await request(nc, 'group.get', { group_id: id })) as unknown as GroupReply;
const statusOf = (jobId: string) => node.store.get(jobId)?.state.job.value;
const groupStatus = (id: string) => node.aggregates.get('group', id)?.state.value;

describe('groups', () => {
  test('sequential across queues: each member waits for the one before; the group completes', async () => {
    const a = uniqueQueue('grp-a');
    const b = uniqueQueue('grp-b');
    const created = ok(await request(nc, 'group.create', { name: 'etl', mode: 'sequential', jobs: [{ queue: a }, { queue: b }, { queue: a }] }));
    const [m0, m1, m2] = created['jobs'] as string[];
    expect([statusOf(m0!), statusOf(m1!), statusOf(m2!)]).toEqual(['queued', 'waiting', 'waiting']);
    const [first] = await claim(nc, a, { max: 5 });
    expect(first!.job_id).toBe(m0);
    await eventually(() => groupStatus(created['group_id'] as string) === 'running', 'group running');
    await complete(nc, a, first!);
    const [second] = await claim(nc, b, { wait_ms: 5_000 });
    expect(second!.job_id).toBe(m1);
    expect(await claim(nc, a)).toEqual([]);
    await complete(nc, b, second!);
    const [third] = await claim(nc, a, { wait_ms: 5_000 });
    expect(third!.job_id).toBe(m2);
    await complete(nc, a, third!);
    await eventually(() => groupStatus(created['group_id'] as string) === 'completed', 'group completed');
    expect((await group(created['group_id'] as string)).members.map((m) => m.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    // explain: the third member (queue a) was held by the second (queue b) until it ended, then released.
    const at = (jobId: string, type: string) => node.store.get(jobId)!.later.find((h) => h.type === type)!;
    const secondEnd = at(m1!, 'job.succeeded');
    const thirdRelease = at(m2!, 'job.released');
    const explained = await explainJob(nc, m2!);
    expect(explained.waits).toEqual({
      group: {
        group_id: created['group_id'], name: 'etl', mode: 'sequential', on_failure: 'stop', member: 2, members: 3,
        previous: { job_id: m1, queue: b, status: 'succeeded', decided_by: null, ended: { type: 'job.succeeded', seq: commitSeqOf(secondEnd.seq), index: indexOf(secondEnd.seq), time: secondEnd.time } },
      },
      dependencies: [],
      released: { seq: commitSeqOf(thirdRelease.seq), index: indexOf(thirdRelease.seq), time: thirdRelease.time },
      instead: null,
    });
    expect(explained.notes).toContain(
      `member 3 of 3 of sequential group ${String(created['group_id'])} (etl), on_failure stop: held until member 2 ${m1} ended succeeded at ${secondEnd.time} (${commitSeqOf(secondEnd.seq)}:${indexOf(secondEnd.seq)}); released at ${thirdRelease.time} (${commitSeqOf(thirdRelease.seq)}:${indexOf(thirdRelease.seq)})`,
    );
    // The first member was never held: nothing to say about waits.
    expect((await explainJob(nc, m0!)).waits).toBeNull();
  });

  test('on_failure stop cancels the members not started; skip skips them; continue goes on; the status is partial', async () => {
    for (const [onFailure, rest] of [['stop', 'cancelled'], ['skip', 'skipped'], ['continue', 'queued']] as const) {
      const q = uniqueQueue(`grp-${onFailure}`);
      const created = ok(await request(nc, 'group.create', { mode: 'sequential', on_failure: onFailure, jobs: [{ queue: q }, { queue: q }] }));
      const [m0, m1] = created['jobs'] as string[];
      const [first] = await claim(nc, q);
      await fail(nc, q, first!, { message: 'broken' });
      await eventually(() => statusOf(m1!) === rest, `${onFailure}: the next member ${rest}`);
      if (onFailure === 'continue') {
        const [next] = await claim(nc, q);
        expect(next!.job_id).toBe(m1);
        await complete(nc, q, next!);
      }
      await eventually(() => groupStatus(created['group_id'] as string) === 'partial', `${onFailure}: partial`);
      expect(statusOf(m0!)).toBe('failed');
      // explain: held by the failed member, then skipped or cancelled by on_failure instead of released.
      if (onFailure !== 'continue') {
        const explained = await explainJob(nc, m1!);
        expect(explained.waits).toMatchObject({ released: null, instead: { type: `job.${rest}`, reason: `group member ${m0!} failed` }, group: { on_failure: onFailure, previous: { job_id: m0, status: 'failed', ended: { type: 'job.failed' } } } });
        expect(explained.notes.join('\n')).toContain(`${rest} while waiting at`);
      }
    }
  });

  test('a member that fails with a retry to come has not ended: the next member waits for its retry, which decides', async () => {
    const q = uniqueQueue('grp-retry');
    const noBackoff = { base_ms: 0, max_ms: 0, jitter: 0 };
    const created = ok(await request(nc, 'group.create', { mode: 'sequential', on_failure: 'stop', jobs: [{ queue: q, max_attempts: 2, backoff: noBackoff }, { queue: q }] }));
    const groupId = created['group_id'] as string;
    const [m0, m1] = created['jobs'] as string[];
    const [first] = await claim(nc, q);
    await fail(nc, q, first!, { message: 'flaky' });
    const retry = await untilRetryOf(node, m0!);
    // The retry goes out next, not the second member (which `stop` must not cancel either).
    const [again] = await claim(nc, q, { wait_ms: 5_000 });
    expect(again!.job_id).toBe(retry.jobId);
    expect(statusOf(m1!)).toBe('waiting');
    expect(groupStatus(groupId)).toBe('running');
    await complete(nc, q, again!);
    await untilJob(node, m1!, (r) => r.state.job.value === 'queued', 'the second member released once the retry succeeded');
    const retryEnd = node.store.get(retry.jobId)!.later.find((h) => h.type === 'job.succeeded')!.seq;
    expect(node.store.get(m1!)!.later.find((h) => h.type === 'job.released')!.seq).toBeGreaterThan(retryEnd);
    const [second] = await claim(nc, q);
    expect(second!.job_id).toBe(m1);
    await complete(nc, q, second!);
    // The first member's chain succeeded in the end, but one of its runs failed: seed 003 says partial.
    await eventually(() => groupStatus(groupId) === 'partial', 'group partial', 10_000);
    // explain: the second member was held until the first member's retry succeeded.
    const explained = await explainJob(nc, m1!);
    expect(explained.waits!.group!.previous).toEqual({ job_id: m0, queue: q, status: 'succeeded', decided_by: retry.jobId, ended: { type: 'job.succeeded', seq: commitSeqOf(retryEnd), index: indexOf(retryEnd), time: expect.any(String) } });
    expect(explained.notes.join('\n')).toContain(`held until member 1 ${m0!} (its retry ${retry.jobId}) ended succeeded at`);
  });

  test('cancelling a group cancels a member\'s retry to come too, and the group ends', async () => {
    const q = uniqueQueue('grp-retry-cancel');
    const created = ok(await request(nc, 'group.create', { mode: 'sequential', on_failure: 'stop', jobs: [{ queue: q, max_attempts: 2, backoff: { base_ms: 60_000, max_ms: 60_000, jitter: 0 } }, { queue: q }] }));
    const groupId = created['group_id'] as string;
    const [m0, m1] = created['jobs'] as string[];
    const [first] = await claim(nc, q);
    await fail(nc, q, first!, { message: 'flaky' });
    const retry = await untilRetryOf(node, m0!);
    const cancelled = ok(await request(nc, 'group.cancel', { group_id: groupId }));
    expect((cancelled['cancelled'] as string[]).sort()).toEqual([retry.jobId, m1!].sort());
    await untilJob(node, retry.jobId, (r) => r.state.job.value === 'cancelled', 'the retry cancelled');
    // Not every job was cancelled (the first member's run failed): partial.
    await eventually(() => groupStatus(groupId) === 'partial', 'group ended partial');
  });

  test('parallel members run together; cancelling the group cancels its live members and it ends cancelled', async () => {
    const q = uniqueQueue('grp-par');
    const created = ok(await request(nc, 'group.create', { mode: 'parallel', jobs: [{ queue: q }, { queue: q }, { queue: q }] }));
    const members = created['jobs'] as string[];
    expect(members.map((id) => statusOf(id))).toEqual(['queued', 'queued', 'queued']);
    const cancelled = ok(await request(nc, 'group.cancel', { group_id: created['group_id'] }));
    expect((cancelled['cancelled'] as string[]).sort()).toEqual([...members].sort());
    await eventually(() => groupStatus(created['group_id'] as string) === 'cancelled', 'group cancelled');
    const listed = ok(await request(nc, 'group.list', {}));
    expect((listed['groups'] as { group_id: string; status: string }[]).find((g) => g.group_id === created['group_id'])).toMatchObject({ status: 'cancelled' });
  });

  test('a resent create (same id) makes nothing twice; bad input is refused', async () => {
    const q = uniqueQueue('grp-resend');
    const body = { id: `create-${q}`, mode: 'parallel', jobs: [{ queue: q }, { queue: q }] };
    const first = ok(await request(nc, 'group.create', body));
    const again = ok(await request(nc, 'group.create', body));
    expect(again['group_id']).toBe(first['group_id']);
    expect(again['jobs']).toEqual(first['jobs']);
    expect(again['replayed']).toBe(true);
    expect(node.store.get((first['jobs'] as string[])[0]!)).toBeDefined();
    for (const bad of [{ mode: 'parallel', jobs: [] }, { mode: 'zigzag', jobs: [{ queue: q }] }, { mode: 'parallel', jobs: [{ queue: q, key: 'k' }] }]) {
      const reply = await request(nc, 'group.create', bad);
      expect(reply.ok || reply.error, JSON.stringify(bad)).toMatchObject({ code: 'invalid_request' });
    }
    const unknown = await request(nc, 'group.get', { group_id: 'nope' });
    expect(unknown.ok || unknown.error).toMatchObject({ code: 'not_found' });
  });

  test('a restart in the middle of a sequential group goes on from the log', async () => {
    const q = uniqueQueue('grp-restart');
    const created = ok(await request(nc, 'group.create', { mode: 'sequential', jobs: [{ queue: q }, { queue: q }] }));
    const [m0, m1] = created['jobs'] as string[];
    const [first] = await claim(nc, q);
    await node.close();
    node = await startTrackedNode(server, { nodeName: 'groups', dataDir });
    await complete(nc, q, first!);
    await eventually(() => statusOf(m1!) === 'queued', 'the second member released after the restart', 15_000);
    const [second] = await claim(nc, q);
    await complete(nc, q, second!);
    await eventually(() => groupStatus(created['group_id'] as string) === 'completed', 'completed', 15_000);
    expect(statusOf(m0!)).toBe('succeeded');
  });
});

test('the audit finds the groups kept their order and their statuses equal the derivation', async () => {
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog } = await import('../../src/store/read-log.js');
  const messages = [];
  for await (const m of readLog(nc, {})) messages.push(m);
  const report = auditMessages(messages);
  expect(report.violations).toEqual([]);
  // Groups were audited: their events were folded (other kinds' events counted).
  expect(messages.length).toBeGreaterThan(0);
});

test('the audit names a sequential member claimed while the member before it had not ended (a forged commit)', async () => {
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog } = await import('../../src/store/read-log.js');
  const { commitAsDeposed } = await import('../support/docket.js');
  const { resendOnUnavailable } = await import('../support/worker-helpers.js');
  const { jetstreamManager } = await import('@nats-io/jetstream');
  const violations = async () => {
    const messages = [];
    for await (const m of readLog(nc, {})) messages.push(m);
    return auditMessages(messages).violations.map((v) => [v.rule, v.aggregate]);
  };
  expect(await violations()).toEqual([]);
  const q = uniqueQueue('grp-forged');
  const created = ok(await request(nc, 'group.create', { mode: 'sequential', jobs: [{ queue: q }, { queue: q }] }));
  const [m0, m1] = created['jobs'] as string[];
  expect([statusOf(m0!), statusOf(m1!)]).toEqual(['queued', 'waiting']);
  // A writer that is not the leader releases and claims the second member while the first is still queued.
  const time = new Date().toISOString();
  await commitAsDeposed(node, await jetstreamManager(nc), q, [
    { id: `forged-release-${q}`, type: 'job.released', time, aggregate: { kind: 'job', id: m1! }, queue: q, data: {}, meta: { node: 'forger' } },
    { id: `forged-claim-${q}`, type: 'job.claimed', time, aggregate: { kind: 'job', id: m1! }, queue: q, data: { run_id: `forged-run-${q}`, worker: 'forger', host: 'h', pid: 1, version: 'v', lease_ms: 60_000 }, meta: { node: 'forger' } },
  ]);
  // The leader meets the foreign commit at its next append and goes on.
  await resendOnUnavailable(() => request(nc, 'submit', { queue: q }) as never);
  expect(await violations()).toEqual([['group_rule', `job:${m1!}`]]);
  await request(nc, 'group.cancel', { group_id: created['group_id'] });
});

test('the CLI shows a group and lists groups; the SDK creates one', async () => {
  const { execFile } = await import('node:child_process');
  const { promisify } = await import('node:util');
  const q = uniqueQueue('grp-cli');
  const { group_id, jobs } = await client.createGroup({ name: 'nightly', mode: 'sequential', jobs: [{ queue: q }, { queue: q }] });
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'docket.js');
  const env = { ...process.env };
  delete env['NATS_URL'];
  // Not spawnSync: the node answering the CLI runs in this process.
  const run = (args: string[]) => promisify(execFile)(process.execPath, [bin, ...args, '--server', server.url], { encoding: 'utf8', env });
  const shown = await run(['group', 'show', group_id]);
  expect(shown.stdout).toContain('nightly');
  expect(shown.stdout).toContain(jobs[1]!);
  expect(shown.stdout).toMatch(/waiting/);
  // explain through the CLI: the second member is held by the first, which has not ended.
  const explained = await run(['explain', jobs[1]!]);
  expect(explained.stdout).toContain(`note: member 2 of 2 of sequential group ${group_id} (nightly), on_failure stop: held until member 1 ${jobs[0]!} had not ended (queued); not released yet`);
  const listed = JSON.parse((await run(['group', 'ls', '--json'])).stdout) as { groups: { group_id: string }[] };
  expect(listed.groups.map((g) => g.group_id)).toContain(group_id);
  expect((await client.group(group_id))['status']).toBe('queued');
});
