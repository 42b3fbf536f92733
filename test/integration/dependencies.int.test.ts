/**
 * Dependencies (issue 15): a job submitted with depends_on waits until every job it names has
 * succeeded (in any queue), then is released; a dependency that ends otherwise skips it, naming
 * it; a failed dependency that gets a retry is followed to the retry (the chain's last attempt
 * decides); unknown or failed-for-good dependencies are refused with nothing appended; a restart
 * in the middle of a chain goes on from the log.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, fail, untilJob } from '../support/worker-helpers.js';
import { commitSeqOf, indexOf } from '../../machines/index.js';
import { explainJob } from '../../src/cli/audit-commands.js';
import { closeTestFile, connectTestClients, openResources, request, startTrackedNode, streamMessages, uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
let dataDir: string;

beforeAll(async () => {
  server = await startNatsServer();
  dataDir = await mkdtemp(join(tmpdir(), 'docket-deps-'));
  node = await startTrackedNode(server, { nodeName: 'deps', dataDir });
  ({ client, nc } = await connectTestClients(server, 'deps-test'));
  jsm = await jetstreamManager(nc);
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
  await rm(dataDir, { recursive: true, force: true });
});

afterEach(() => {
  expect(openResources()).toHaveLength(1);
});

async function submit(body: Record<string, unknown>): Promise<string> {
  const reply = await request(nc, 'submit', body);
  if (!reply.ok) throw new Error(JSON.stringify(reply.error));
  return reply['job_id'] as string;
}

const status = (jobId: string) => node.store.get(jobId)?.state.job.value;

describe('depends_on', () => {
  test('a job waits for its dependencies in any queue, then is released in order', async () => {
    const a = uniqueQueue('deps-a');
    const b = uniqueQueue('deps-b');
    const first = await submit({ queue: a });
    const second = await submit({ queue: b });
    const after = await submit({ queue: a, depends_on: [first, second] });
    expect(status(after)).toBe('waiting');
    const [one] = await claim(nc, a, { max: 5 });
    expect(one!.job_id).toBe(first);
    await complete(nc, a, one!);
    expect(status(after)).toBe('waiting');
    const [two] = await claim(nc, b);
    await complete(nc, b, two!);
    await untilJob(node, after, (r) => r.state.job.value === 'queued', 'released');
    expect((await claim(nc, a))[0]!.job_id).toBe(after);
    // Released only after both dependencies' ends: positions in the one log say so.
    const released = node.store.get(after)!.later.find((h) => h.type === 'job.released')!.seq;
    expect(released).toBeGreaterThan(node.store.get(first)!.seq);
    expect(released).toBeGreaterThan(node.store.get(second)!.seq);
    // explain names each dependency with where and when it ended, and when the job was released.
    const explained = await explainJob(nc, after);
    const ends = [first, second].map((id) => node.store.get(id)!.later.find((h) => h.type === 'job.succeeded')!);
    expect(explained.waits).toEqual({
      group: null,
      released: { seq: commitSeqOf(released), index: indexOf(released), time: expect.any(String) },
      instead: null,
      dependencies: ends.map((h, i) => ({ job_id: [first, second][i], queue: [a, b][i], status: 'succeeded', decided_by: null, ended: { type: 'job.succeeded', seq: commitSeqOf(h.seq), index: indexOf(h.seq), time: h.time } })),
    });
    expect(explained.notes.join('\n')).toContain(`waited on its dependencies: ${first} ended succeeded at ${ends[0]!.time} (${commitSeqOf(ends[0]!.seq)}:${indexOf(ends[0]!.seq)}); ${second} ended succeeded at ${ends[1]!.time}`);
  });

  test('a dependency that fails for good skips the job, naming it; a chain of retries is followed to its last attempt', async () => {
    const q = uniqueQueue('deps-fail');
    const doomed = await submit({ queue: q });
    const skipped = await submit({ queue: q, depends_on: [doomed] });
    const flaky = await submit({ queue: q, max_attempts: 2, backoff: { base_ms: 0, max_ms: 0, jitter: 0 } });
    const patient = await submit({ queue: q, depends_on: [flaky] });
    for (const job of await claim(nc, q, { max: 5 })) await fail(nc, q, job, { message: 'boom' });
    await untilJob(node, skipped, (r) => r.state.job.value === 'skipped', 'skipped');
    expect(node.store.get(skipped)!.state.job.context.end_reason).toBe(`dependency ${doomed} failed`);
    // flaky failed with an attempt left: its retry decides, so patient still waits.
    expect(status(patient)).toBe('waiting');
    const [retry] = await claim(nc, q, { max: 5, wait_ms: 5_000 });
    expect(node.store.get(retry!.job_id)!.state.job.context.retry_of).toBe(flaky);
    await complete(nc, q, retry!);
    await untilJob(node, patient, (r) => r.state.job.value === 'queued', 'released after the retry succeeded');
    // explain: skipped naming the failed dependency; released once the retry (the chain's last attempt) succeeded.
    const failedEnd = node.store.get(doomed)!.later.find((h) => h.type === 'job.failed')!;
    const whySkipped = await explainJob(nc, skipped);
    expect(whySkipped.waits).toMatchObject({
      released: null,
      instead: { type: 'job.skipped', reason: `dependency ${doomed} failed` },
      dependencies: [{ job_id: doomed, status: 'failed', decided_by: null, ended: { type: 'job.failed', seq: commitSeqOf(failedEnd.seq), index: indexOf(failedEnd.seq) } }],
    });
    expect(whySkipped.notes.join('\n')).toContain(`${doomed} ended failed at ${failedEnd.time}`);
    const whyReleased = await explainJob(nc, patient);
    expect(whyReleased.waits?.dependencies).toEqual([expect.objectContaining({ job_id: flaky, status: 'succeeded', decided_by: retry!.job_id, ended: expect.objectContaining({ type: 'job.succeeded' }) })]);
    expect(whyReleased.waits!.released!.seq).toBeGreaterThan(whyReleased.waits!.dependencies[0]!.ended!.seq);
    expect(whyReleased.notes.join('\n')).toContain(`${flaky} (its retry ${retry!.job_id}) ended succeeded at`);
  });

  test('an unknown dependency, or one failed for good, is refused and nothing is appended', async () => {
    const q = uniqueQueue('deps-bad');
    const failed = await submit({ queue: q });
    const [job] = await claim(nc, q);
    await fail(nc, q, job!, { message: 'done for' });
    await untilJob(node, failed, (r) => r.state.job.value === 'failed', 'failed');
    const before = await streamMessages(jsm);
    for (const depends_on of [['nope'], [failed], []]) {
      const reply = await request(nc, 'submit', { queue: q, depends_on });
      expect(reply.ok || reply.error, JSON.stringify(depends_on)).toMatchObject({ code: 'invalid_request' });
    }
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('a restart in the middle of a chain goes on from the log', async () => {
    const q = uniqueQueue('deps-restart');
    const first = await submit({ queue: q });
    const second = await submit({ queue: q, depends_on: [first] });
    const third = await submit({ queue: q, depends_on: [second] });
    const [one] = await claim(nc, q);
    await node.close();
    node = await startTrackedNode(server, { nodeName: 'deps', dataDir });
    await complete(nc, q, one!);
    await untilJob(node, second, (r) => r.state.job.value === 'queued', 'second released after the restart');
    expect(status(third)).toBe('waiting');
    const [two] = await claim(nc, q, { wait_ms: 5_000 });
    expect(two!.job_id).toBe(second);
    await complete(nc, q, two!);
    await untilJob(node, third, (r) => r.state.job.value === 'queued', 'third released');
  });
});

test('the audit finds the dependency rule kept on the whole log, and names a release forged before its dependency ended', async () => {
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog } = await import('../../src/store/read-log.js');
  const { commitAsDeposed } = await import('../support/docket.js');
  const { resendOnUnavailable } = await import('../support/worker-helpers.js');
  const all = async () => {
    const messages = [];
    for await (const m of readLog(nc, {})) messages.push(m);
    return auditMessages(messages).violations;
  };
  expect(await all()).toEqual([]);
  const q = uniqueQueue('deps-forged');
  const dependency = await submit({ queue: q });
  const waiting = await submit({ queue: q, depends_on: [dependency] });
  await commitAsDeposed(node, jsm, q, [
    { id: `forged-release-${q}`, type: 'job.released', time: new Date().toISOString(), aggregate: { kind: 'job', id: waiting }, queue: q, data: {}, meta: { node: 'forger' } },
  ]);
  // The leader meets the foreign commit at its next append and goes on.
  await resendOnUnavailable(() => request(nc, 'submit', { queue: q }) as never);
  const violations = (await all()).map((v) => [v.rule, v.aggregate]);
  expect(violations).toEqual([['released_before_dependencies', `job:${waiting}`]]);
});
