/**
 * Flow control across a real crash (issue 15's restarts, issue 17's "limits still hold"):
 * `docket up` as a child process with a data directory holds
 *   A:  a reservation whose ttl outlives the restart, over queued jobs;
 *   A2: a reservation with a short ttl, killed and restarted inside it;
 *   B:  a paused queue with queued jobs;
 *   C:  `concurrency: 2` with two running jobs (short lease, nobody heartbeats) and two queued.
 * The node is SIGKILLed and started again on the same stream and data directory. After the
 * restart: A is still reserved under the same id and hands out nothing; A2 expires at its
 * expires_at, by the new node, and its job goes out then; B hands out nothing until resumed, then
 * all of its jobs; C's two runs still count against its limit until the lease keeper fails them
 * with crash_recovery, then the queued two go out. The audit finds nothing wrong in the log.
 *
 * Run twice: once folding the whole log at restart (no checkpoint: SIGKILL leaves none), once
 * from a checkpoint (a SIGTERM in between writes one) plus a tail written after it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { Client, type RecordedEvent } from '../../src/client/client.js';
import type { ClaimedJob } from '../../src/commands/schemas.js';
import { decodeCommit } from '../../src/nats/codec.js';
import { queuePartition, subjects } from '../../src/nats/subjects.js';
import { readLog } from '../../src/store/read-log.js';
import { request, uniqueQueue, type RawReply } from '../support/docket.js';
import { startDocketProcess, type DocketProcess } from '../support/docket-process.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim as claimOnce, resendOnUnavailable, work } from '../support/worker-helpers.js';

/** C's runs: short, so the crash-recovery lapse comes soon after the restart. */
const LEASE_MS = 4_000;
const LONG_TTL_MS = 20_000;
/**
 * A2's ttl: longer than a kill and a restart take, so the new node is the one that expires it:
 * three times the first start of the node here, and no less than this.
 */
const MIN_SHORT_TTL_MS = 3_000;

let server: TestNatsServer | undefined;
let dataDir: string;
let node: DocketProcess | undefined;
let client: Client | undefined;

beforeEach(async () => {
  server = await startNatsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'docket-flow-kill-'));
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

function ok(reply: RawReply, what: string): Record<string, unknown> {
  if (!reply.ok) throw new Error(`${what}: expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

/** A claim answered now (wait_ms 0 unless given), resent while the queue's leader is not there yet. */
async function claim(nc: NatsConnection, queue: string, body: { max: number; wait_ms?: number; lease_ms?: number }): Promise<ClaimedJob[]> {
  const full = { worker: 'kill-test', wait_ms: 0, ...body };
  const reply = await resendOnUnavailable(() => work<{ jobs: ClaimedJob[] }>(nc, queue, 'claim', full, full.wait_ms + 15_000), undefined, 50);
  if (!reply.ok) throw new Error(`claim on ${queue}: ${JSON.stringify(reply.error)}`);
  return reply.jobs;
}

/** A command to a queue's leader, resent while the new node is not its leader yet. */
async function command(nc: NatsConnection, verb: string, body: unknown): Promise<Record<string, unknown>> {
  const reply = await resendOnUnavailable(() => request(nc, verb, body) as Promise<RawReply>, undefined, 50);
  return ok(reply, verb);
}

async function submit(nc: NatsConnection, queue: string, n: number, spec: Record<string, unknown> = {}): Promise<string[]> {
  const reply = ok(await request(nc, 'submit', { jobs: Array.from({ length: n }, (_, i) => ({ queue, params: { i }, ...spec })) }), 'submit');
  return (reply['jobs'] as { job_id: string }[]).map((j) => j.job_id);
}

/** The next `n` events an iterator yields, or a failure naming what was awaited. */
async function nextEvents(it: AsyncIterator<RecordedEvent>, n: number, what: string, timeoutMs = 30_000): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what} (${out.length} of ${n} seen)`)), timeoutMs);
  });
  try {
    while (out.length < n) {
      const next = await Promise.race([it.next(), deadline]);
      if (next.done) throw new Error(`event stream ended waiting for ${what}`);
      out.push(next.value);
    }
    return out;
  } finally {
    clearTimeout(timer);
  }
}

/** The node's JSON log lines. */
function logLines(p: DocketProcess): ({ msg?: string } & Record<string, unknown>)[] {
  return p
    .log()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as { msg?: string } & Record<string, unknown>);
}

interface Commit {
  readonly seq: number;
  /** When the server stored it (ms). */
  readonly time: number;
  readonly writer: { readonly node: string; readonly epoch: number };
  readonly types: string[];
}

/** The commits of one queue's partition with their writer. */
async function commitsOf(nc: NatsConnection, queue: string): Promise<Commit[]> {
  const out: Commit[] = [];
  for await (const m of readLog(nc, { filter: subjects.partition(queuePartition(queue)) })) {
    const commit = decodeCommit(m.data);
    out.push({ seq: m.seq, time: m.time, writer: commit.writer, types: commit.events.map((e) => e.type) });
  }
  return out;
}

describe.each([
  { name: 'the whole log folded at restart', checkpoint: false },
  { name: 'a checkpoint and the tail after it folded at restart', checkpoint: true },
])('SIGKILL with a reservation, a pause and a full concurrency limit: $name', ({ checkpoint }) => {
  test('every hold is where it was after the restart, and lifts as it would have', { timeout: 180_000 }, async () => {
    const url = server!.url;
    const firstStart = Date.now();
    node = await startDocketProcess({ server: url, dataDir });
    const shortTtlMs = Math.max(MIN_SHORT_TTL_MS, 3 * (Date.now() - firstStart));
    client = await Client.connect({ servers: url, requestTimeoutMs: 15_000 });
    const nc = client.nc;
    const [qa, qa2, qb, qc] = ['kill-reserved', 'kill-expiring', 'kill-paused', 'kill-limited'].map(uniqueQueue) as [string, string, string, string];

    // A: reserved over two queued jobs, for longer than the test needs.
    const aJobs = await submit(nc, qa, 2);
    const reservedA = await command(nc, 'reserve', { queue: qa, holder: 'ops', ttl_ms: LONG_TTL_MS });
    // B: paused with three queued jobs.
    const bJobs = await submit(nc, qb, 3);
    await command(nc, 'pause', { queue: qb, reason: 'before the crash', actor: 'alice' });
    // C: two of four jobs running under concurrency 2; nobody will heartbeat them.
    await command(nc, 'queue.set', { queue: qc, concurrency: 2, create: true });
    const cJobs = await submit(nc, qc, 4, { max_attempts: 1 });
    const running = await claimOnce(nc, qc, { max: 4, lease_ms: LEASE_MS });
    expect(running.map((j) => j.job_id)).toEqual(cJobs.slice(0, 2));
    // Before the crash, as after it: the held queues hand out nothing.
    expect(await claim(nc, qa, { max: 5 })).toEqual([]);
    expect(await claim(nc, qb, { max: 5 })).toEqual([]);
    expect(await claim(nc, qc, { max: 5 })).toEqual([]);

    if (checkpoint) {
      // A clean stop writes a checkpoint holding all of the above; the next node starts from it,
      // writes a tail (A renewed) and is the one killed.
      await node.kill('SIGTERM');
      expect(node.log()).toContain('checkpoint written');
      node = await startDocketProcess({ server: url, dataDir });
    }
    const expectedA = checkpoint ? await command(nc, 'renew', { reservation_id: reservedA['reservation_id'], ttl_ms: LONG_TTL_MS }) : reservedA;
    // A2: one queued job, reserved for a short while: killed and restarted inside it.
    const [a2Job] = await submit(nc, qa2, 1);
    const reservedA2 = await command(nc, 'reserve', { queue: qa2, holder: 'short', ttl_ms: shortTtlMs });
    const a2ExpiresAt = Date.parse(reservedA2['expires_at'] as string);
    const a2Before = await commitsOf(nc, qa2);

    // Every C failure from the start of the stream: none before the crash.
    const cFailures = client.events({ queue: qc, types: ['job.failed'], from: 'all' })[Symbol.asyncIterator]();

    await node.kill('SIGKILL');
    expect(node.child.signalCode).toBe('SIGKILL');
    node = await startDocketProcess({ server: url, dataDir });
    const restartedAt = Date.now();
    // The premise: A2 was still active when the new node began to serve.
    expect(restartedAt, 'the restart took longer than the short reservation lives').toBeLessThan(a2ExpiresAt);
    // The new node started from the checkpoint (queue and reservation aggregates in it), or from the log alone.
    const restored = logLines(node).filter((l) => l.msg === 'checkpoint restored');
    if (checkpoint) expect(restored).toEqual([expect.objectContaining({ aggregates: expect.any(Number) })]);
    else expect(restored).toEqual([]);
    if (checkpoint) expect(restored[0]!['aggregates']).toBeGreaterThanOrEqual(3);

    // C first: its runs' fresh leases lapse LEASE_MS after the new node leads the queue.
    expect(await claim(nc, qc, { max: 5 })).toEqual([]);
    const shownC = await command(nc, 'queue.show', { queue: qc });
    expect(shownC).toMatchObject({ settings: { concurrency: 2 }, running: 2, held: { reason: 'concurrency' }, waiting_by_reason: { concurrency: 2 } });

    // A: still reserved under the same id and expiry; claims get nothing.
    expect(await claim(nc, qa, { max: 5 })).toEqual([]);
    const shownA = await command(nc, 'queue.show', { queue: qa });
    expect(shownA).toMatchObject({ held: { reason: 'reservation' }, reservation: { reservation_id: reservedA['reservation_id'], holder: 'ops', expires_at: expectedA['expires_at'] } });
    expect((await command(nc, 'reservations', { queue: qa }))['reservations']).toEqual([expect.objectContaining({ reservation_id: reservedA['reservation_id'] })]);

    // B: still paused, with who and why; claims get nothing until resumed, then all three jobs.
    expect(await claim(nc, qb, { max: 5 })).toEqual([]);
    expect(await command(nc, 'queue.show', { queue: qb })).toMatchObject({ status: 'paused', paused: { reason: 'before the crash', by: 'alice' }, held: { reason: 'paused' } });
    const waitingB = claim(nc, qb, { max: 5, wait_ms: 15_000 });
    await command(nc, 'resume', { queue: qb });
    expect((await waitingB).map((j) => j.job_id).sort()).toEqual([...bJobs].sort());

    // A2: a long poll gets its job once the reservation expired, not before its expires_at.
    const a2Claimed = await claim(nc, qa2, { max: 5, wait_ms: shortTtlMs + 15_000 });
    expect(a2Claimed.map((j) => j.job_id)).toEqual([a2Job]);
    expect(Date.now()).toBeGreaterThanOrEqual(a2ExpiresAt);
    const a2After = (await commitsOf(nc, qa2)).slice(a2Before.length);
    const expiry = a2After.filter((c) => c.types.includes('reservation.expired'));
    expect(expiry).toHaveLength(1);
    expect(expiry[0]!.time).toBeGreaterThanOrEqual(a2ExpiresAt);
    // Written by the new leader: the queue's lease was taken again, at a later epoch.
    expect(expiry[0]!.writer.epoch).toBeGreaterThan(a2Before.at(-1)!.writer.epoch);

    // C: the two runs fail with crash_recovery (nobody heartbeats), then the queued two go out.
    const failed = await nextEvents(cFailures, 2, `two job.failed on ${qc}`, LEASE_MS + 20_000);
    expect(failed.map((e) => e.event.aggregate.id).sort()).toEqual(cJobs.slice(0, 2).sort());
    expect(failed.map((e) => (e.event.data as { reason: string }).reason)).toEqual(['crash_recovery', 'crash_recovery']);
    expect(Date.now() - restartedAt).toBeGreaterThanOrEqual(LEASE_MS - 500);
    await cFailures.return?.(undefined);
    expect((await claim(nc, qc, { max: 5, wait_ms: 10_000 })).map((j) => j.job_id).sort()).toEqual(cJobs.slice(2).sort());

    // A: released by the id the restarted node still knows; its jobs go out.
    await command(nc, 'release', { reservation_id: reservedA['reservation_id'] });
    expect((await claim(nc, qa, { max: 5, wait_ms: 10_000 })).map((j) => j.job_id).sort()).toEqual([...aJobs].sort());

    // The whole log: no claim while held, no limit exceeded, every event legal.
    const { auditMessages } = await import('../../src/audit/index.js');
    const messages = [];
    for await (const m of readLog(nc, {})) messages.push(m);
    const report = auditMessages(messages);
    expect(report.violations).toEqual([]);
    const types = messages.flatMap((m) => decodeCommit(m.data).events.map((e) => e.type));
    expect(types.filter((t) => t === 'reservation.expired')).toHaveLength(1);
    expect(types.filter((t) => t === 'reservation.released')).toHaveLength(1);
  });
});
