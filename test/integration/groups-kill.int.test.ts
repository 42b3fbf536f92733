/**
 * Groups and dependencies across a real crash (issue 15's "after restart every one continues
 * exactly where it was"): `docket up` as a child process with a data directory holds
 *   G: a sequential group of five (on_failure continue): two members succeeded, the third running
 *      under a short lease nobody heartbeats, the last two waiting;
 *   D: a dependency chain a -> b -> c across two queues: a succeeded, b running (its worker lives
 *      on), c waiting.
 * The node is SIGKILLed and started again on the same stream and data directory. After the
 * restart: the third member's run lapses (crash_recovery) and only then are the fourth and fifth
 * released, one after the other; the group ends `partial` (seed 003: a run failed); b's worker
 * completes it through the new node and c is released, runs and completes. In the log: every job
 * claimed once, every member released after the one before it ended and claimed after its
 * release, c released after b succeeded and b after a, and the audit finds nothing wrong.
 *
 * Run twice: once folding the whole log at restart (no checkpoint: SIGKILL leaves none), once
 * from a checkpoint (a SIGTERM after the first member and a succeeded) plus a tail written after it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { auditMessages } from '../../src/audit/index.js';
import { Client } from '../../src/client/client.js';
import type { ClaimedJob } from '../../src/commands/schemas.js';
import { decodeCommit } from '../../src/nats/codec.js';
import { readLog } from '../../src/store/read-log.js';
import { request, uniqueQueue, type RawReply } from '../support/docket.js';
import { startDocketProcess, type DocketProcess } from '../support/docket-process.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { resendOnUnavailable, work, type WorkReply } from '../support/worker-helpers.js';

/** The running member's lease: short, so its lapse comes soon after the restart. */
const SHORT_LEASE_MS = 6_000;
/** b's lease: outlives the crash and the restart, so its worker completes it. */
const LONG_LEASE_MS = 120_000;

let server: TestNatsServer | undefined;
let dataDir: string;
let node: DocketProcess | undefined;
let client: Client | undefined;

beforeEach(async () => {
  server = await startNatsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'docket-groups-kill-'));
});

afterEach(async () => {
  await client?.close();
  client = undefined;
  await node?.kill('SIGKILL');
  node = undefined;
  await server?.stop();
  server = undefined;
  rmSync(dataDir, { recursive: true, force: true });
});

function ok<T>(reply: WorkReply<T> | RawReply, what: string): T & Record<string, unknown> {
  if (!reply.ok) throw new Error(`${what}: expected ok, got ${JSON.stringify(reply.error)}`);
  return reply as T & Record<string, unknown>;
}

/** A command, resent while the (new) node does not lead its partition yet. */
async function command(nc: NatsConnection, verb: string, body: unknown): Promise<Record<string, unknown>> {
  return ok(await resendOnUnavailable(() => request(nc, verb, body) as Promise<RawReply>, undefined, 50), verb);
}

/** A claim (wait_ms 0 unless given), resent while the queue's leader is not there yet. */
async function claim(nc: NatsConnection, queue: string, body: { max?: number; wait_ms?: number; lease_ms: number }): Promise<ClaimedJob[]> {
  const full = { worker: 'groups-kill', max: 5, wait_ms: 0, ...body };
  return ok(await resendOnUnavailable(() => work<{ jobs: ClaimedJob[] }>(nc, queue, 'claim', full, full.wait_ms + 15_000), undefined, 50), `claim on ${queue}`).jobs;
}

/** Claims exactly `jobId` (waiting up to `waitMs` for it to be released). */
async function claimOnly(nc: NatsConnection, queue: string, jobId: string, leaseMs: number, waitMs = 15_000): Promise<ClaimedJob> {
  const jobs = await claim(nc, queue, { wait_ms: waitMs, lease_ms: leaseMs });
  expect(jobs.map((j) => j.job_id), `the claim on ${queue}`).toEqual([jobId]);
  return jobs[0]!;
}

async function complete(nc: NatsConnection, queue: string, job: ClaimedJob): Promise<void> {
  ok(await resendOnUnavailable(() => work(nc, queue, 'complete', { job_id: job.job_id, run_id: job.run_id, result: null }), undefined, 50), `complete ${job.job_id}`);
}

/** Every event of the log by job id: its type and position (stream sequence, index in the commit). */
async function jobEvents(nc: NatsConnection): Promise<{ messages: Awaited<ReturnType<typeof collect>>; byJob: Map<string, { type: string; at: number; data: Record<string, unknown> }[]> }> {
  const messages = await collect(nc);
  const byJob = new Map<string, { type: string; at: number; data: Record<string, unknown> }[]>();
  for (const m of messages) {
    decodeCommit(m.data).events.forEach((e, index) => {
      if (e.aggregate.kind !== 'job') return;
      const list = byJob.get(e.aggregate.id) ?? [];
      // One number that orders events: commits by stream sequence, events by index inside one.
      list.push({ type: e.type, at: m.seq * 10_000 + index, data: (e.data ?? {}) as Record<string, unknown> });
      byJob.set(e.aggregate.id, list);
    });
  }
  return { messages, byJob };
}

async function collect(nc: NatsConnection) {
  const messages = [];
  for await (const m of readLog(nc, {})) messages.push(m);
  return messages;
}

describe.each([
  { name: 'the whole log folded at restart', checkpoint: false },
  { name: 'a checkpoint and the tail after it folded at restart', checkpoint: true },
])('SIGKILL with a sequential group half done and a dependency chain mid-way: $name', ({ checkpoint }) => {
  test('every one continues where it was: nothing runs twice or out of order, the group ends partial, the chain completes', { timeout: 180_000 }, async () => {
    const url = server!.url;
    node = await startDocketProcess({ server: url, dataDir });
    client = await Client.connect({ servers: url, requestTimeoutMs: 15_000 });
    const nc = client.nc;
    const [qg, qd, qd2] = ['kill-group', 'kill-chain', 'kill-chain-b'].map(uniqueQueue) as [string, string, string];

    const created = await command(nc, 'group.create', { name: 'half-done', mode: 'sequential', on_failure: 'continue', jobs: Array.from({ length: 5 }, (_, i) => ({ queue: qg, params: { i }, max_attempts: 1 })) });
    const groupId = created['group_id'] as string;
    const members = created['jobs'] as string[];
    const a = (await command(nc, 'submit', { queue: qd, params: { step: 'a' } }))['job_id'] as string;
    const b = (await command(nc, 'submit', { queue: qd2, params: { step: 'b' }, depends_on: [a] }))['job_id'] as string;
    const c = (await command(nc, 'submit', { queue: qd, params: { step: 'c' }, depends_on: [b] }))['job_id'] as string;

    // The first member and a succeed.
    await complete(nc, qg, await claimOnly(nc, qg, members[0]!, LONG_LEASE_MS, 0));
    await complete(nc, qd, await claimOnly(nc, qd, a, LONG_LEASE_MS, 0));

    if (checkpoint) {
      // A clean stop writes a checkpoint holding the above; the next node starts from it and
      // writes the tail below before it is the one killed.
      await node.kill('SIGTERM');
      expect(node.log()).toContain('checkpoint written');
      node = await startDocketProcess({ server: url, dataDir });
    }
    // The second member succeeds; the third is claimed under a short lease nobody will renew; b runs.
    await complete(nc, qg, await claimOnly(nc, qg, members[1]!, LONG_LEASE_MS));
    const third = await claimOnly(nc, qg, members[2]!, SHORT_LEASE_MS);
    const running = await claimOnly(nc, qd2, b, LONG_LEASE_MS);
    expect((await command(nc, 'group.get', { group_id: groupId }))['members']).toEqual(
      ['succeeded', 'succeeded', 'running', 'waiting', 'waiting'].map((status, i) => expect.objectContaining({ job_id: members[i], status })),
    );
    expect(await command(nc, 'get', { job_id: c })).toMatchObject({ job: { status: 'waiting' } });

    await node.kill('SIGKILL');
    expect(node.child.signalCode).toBe('SIGKILL');
    node = await startDocketProcess({ server: url, dataDir });
    const restored = node.log().split('\n').filter((l) => l.includes('"msg":"checkpoint restored"'));
    expect(restored).toHaveLength(checkpoint ? 1 : 0);

    // Where it was: the third member still running (its run not handed out again), the rest of
    // the group waiting; c waiting on b.
    expect(await claim(nc, qg, { lease_ms: LONG_LEASE_MS })).toEqual([]);
    expect(await claim(nc, qd, { lease_ms: LONG_LEASE_MS })).toEqual([]);
    const shown = await command(nc, 'group.get', { group_id: groupId });
    expect(shown).toMatchObject({ status: 'running' });
    expect((shown['members'] as { status: string }[]).map((m) => m.status)).toEqual(['succeeded', 'succeeded', 'running', 'waiting', 'waiting']);

    // D: b's worker completes it through the new node; c is released, runs and completes.
    await complete(nc, qd2, running);
    await complete(nc, qd, await claimOnly(nc, qd, c, LONG_LEASE_MS));

    // G: the third member's run lapses (crash_recovery), then the fourth and fifth go out in order.
    const fourth = await claimOnly(nc, qg, members[3]!, LONG_LEASE_MS, SHORT_LEASE_MS + 30_000);
    expect(await claim(nc, qg, { lease_ms: LONG_LEASE_MS })).toEqual([]);
    await complete(nc, qg, fourth);
    await complete(nc, qg, await claimOnly(nc, qg, members[4]!, LONG_LEASE_MS));
    let group: Record<string, unknown> = {};
    for (let i = 0; i < 200 && group['status'] !== 'partial'; i++) {
      group = await command(nc, 'group.get', { group_id: groupId });
      if (group['status'] !== 'partial') await new Promise((r) => setTimeout(r, 50));
    }
    expect(group).toMatchObject({ status: 'partial' });
    expect((group['members'] as { status: string }[]).map((m) => m.status)).toEqual(['succeeded', 'succeeded', 'failed', 'succeeded', 'succeeded']);

    // The log: every job claimed once; each member released after the one before ended, claimed after its release.
    const { messages, byJob } = await jobEvents(nc);
    const at = (jobId: string, types: readonly string[]) => (byJob.get(jobId) ?? []).filter((e) => types.includes(e.type));
    const ENDS = ['job.succeeded', 'job.failed', 'job.cancelled', 'job.skipped'];
    for (const jobId of [...members, a, b, c]) {
      expect(at(jobId, ['job.claimed']), `${jobId} claimed once`).toHaveLength(1);
      expect(at(jobId, ENDS), `${jobId} ended once`).toHaveLength(1);
      expect(at(jobId, ['job.released']).length, `${jobId} released at most once`).toBeLessThanOrEqual(1);
    }
    const failed = at(members[2]!, ['job.failed'])[0]!;
    expect(failed.data['reason']).toBe('crash_recovery');
    expect(at(members[2]!, ['job.claimed'])[0]!.data['run_id']).toBe(third.run_id);
    for (let i = 1; i < members.length; i++) {
      const [released] = at(members[i]!, ['job.released']);
      const [claimed] = at(members[i]!, ['job.claimed']);
      const [previousEnd] = at(members[i - 1]!, ENDS);
      expect(released, `member ${i} released`).toBeDefined();
      expect(released!.at, `member ${i} released after member ${i - 1} ended`).toBeGreaterThan(previousEnd!.at);
      expect(claimed!.at, `member ${i} claimed after its release`).toBeGreaterThan(released!.at);
    }
    for (const [dependent, dependency] of [[b, a], [c, b]] as const) {
      const [released] = at(dependent, ['job.released']);
      expect(released!.at, `${dependent} released after ${dependency} succeeded`).toBeGreaterThan(at(dependency, ['job.succeeded'])[0]!.at);
      expect(at(dependent, ['job.claimed'])[0]!.at).toBeGreaterThan(released!.at);
    }
    const types = messages.flatMap((m) => decodeCommit(m.data).events.filter((e) => e.aggregate.id === groupId).map((e) => e.type));
    expect(types).toEqual(['group.created', 'group.started', 'group.ended']);
    expect(auditMessages(messages).violations).toEqual([]);
  });
});
