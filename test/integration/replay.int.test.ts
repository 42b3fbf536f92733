/**
 * Replay equals live: a node that ran a workload and a node started afterwards on the same
 * stream hold exactly the same projections (queue order, list index, progress, key index, every
 * job record), whether the new node folds the log from zero or restores a checkpoint and folds
 * the tail. A property runs random command sequences (with concurrent groups, so acks and the
 * tail interleave differently) and compares the live node with a fresh one.
 */
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import fc from 'fast-check';
import { test as fcTest } from '@fast-check/vitest';
import { jetstream, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import type { JobEvent } from '../../machines/index.js';
import type { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import { envelope, transitionJob } from '../../src/commands/handle-command.js';
import { DocketError } from '../../src/errors.js';
import type { Logger } from '../../src/logger.js';
import { queuePartition, subjects } from '../../src/nats/subjects.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { captureProjections, caughtUp, lastSeq, openResources, startTrackedNode, uniqueQueue, type KeyRef, closeTestFile, connectTestClients } from '../support/docket.js';

const NUM_RUNS = Number(process.env['DOCKET_NUM_RUNS'] ?? 20);

let server: TestNatsServer;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-04-01T08:00:00.000Z'));
const dirs: string[] = [];

beforeAll(async () => {
  server = await startNatsServer();
  ({ client, nc, jsm } = await connectTestClients(server, 'replay-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, server });
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

afterEach(() => {
  // The property's live node stays open across its runs; nothing else may.
  expect(openResources().filter((r) => !r.includes('prop-live'))).toEqual([]);
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'docket-replay-'));
  dirs.push(dir);
  return dir;
}

type EventData<T extends JobEvent['type']> = Extract<JobEvent, { type: T }>['data'];

/** Appends one job event through the node's write path (the machines decide; no worker API yet). */
async function append<T extends JobEvent['type']>(node: DocketNode, jobId: string, type: T, data: EventData<T>): Promise<void> {
  await transitionJob(node.context, jobId, undefined, (record, eventId) => envelope(node.context, type, record, eventId, data as never) as JobEvent);
}

const claimData = (runId: string): EventData<'job.claimed'> => ({ run_id: runId, worker: 'w1', host: 'test-host', pid: 4242, version: '0.1.0', lease_ms: 30_000 });

function okIds(results: readonly { ok: boolean; job_id?: string }[]): string[] {
  return results.flatMap((r) => (r.ok && r.job_id !== undefined ? [r.job_id] : []));
}

/**
 * A scripted workload over `queues`: batches with priorities and delays, keyed submits (a key
 * ended and submitted again), a concurrent burst, cancels, claims and their endings (succeeded,
 * failed, cancelled while running, skipped), an artifact, a move, and the clock moving on.
 * Returns the keys it used.
 */
async function mixedWorkload(node: DocketNode, queues: readonly string[], part: string): Promise<KeyRef[]> {
  const keys: KeyRef[] = [];
  for (const queue of queues) {
    const { jobs } = await client.submitBatch(
      Array.from({ length: 30 }, (_, i) => ({
        queue,
        priority: (i * 37) % 7,
        params: { part, i },
        ...(i % 5 === 0 ? { delay_ms: 30_000 } : i % 7 === 0 ? { run_at: '2020-01-01T00:00:00Z' } : {}),
      })),
      { id: `${queue}-${part}-batch` },
    );
    const ids = okIds(jobs);
    for (let k = 0; k < 5; k++) {
      const key = k % 2 === 0 ? `${part}-k${k}` : { subject_id: k, part };
      keys.push({ queue, key });
      const first = await client.submit({ queue, key, priority: k });
      if (k === 1) {
        await client.cancel(first.job_id);
        await client.submit({ queue, key, priority: 9 }); // the key's next generation
      }
      if (k === 2) await client.submit({ queue, key }); // live: created:false
    }
    // A burst: acks and the tail interleave, so the live node applies them out of stream order.
    const burst = await Promise.all(Array.from({ length: 40 }, (_, i) => client.submit({ queue, priority: (i * 11) % 256, params: { burst: i } })));
    await Promise.all(ids.filter((_, i) => i % 4 === 1).map((id) => client.cancel(id, { reason: 'workload' })));

    // Runs: claim four ready jobs, then end them in four different ways.
    const ready = node.queueOrder.snapshot(queue).ready.slice(0, 6);
    const [a, b, c, d, e, f] = ready;
    for (const [i, jobId] of ready.entries()) await append(node, jobId, 'job.claimed', claimData(`run-${part}-${i}`));
    if (a) {
      await append(node, a, 'job.succeeded', { run_id: `run-${part}-0`, result: { ok: true }, exit_code: 0 });
      await append(node, a, 'job.artifact_added', { run_id: `run-${part}-0`, artifact: { name: 'out.png', uri: 's3://b/out.png' } });
    }
    if (b) await append(node, b, 'job.failed', { run_id: `run-${part}-1`, reason: 'error', error: { message: 'boom', retryable: true }, exit_code: 1 });
    if (c) await client.cancel(c, { reason: 'while running' });
    if (d) await append(node, d, 'job.skipped', { run_id: `run-${part}-3`, reason: 'nothing to do' });
    if (e) await append(node, e, 'job.failed', { run_id: `run-${part}-4`, reason: 'lease_expired', error: null });
    void f; // stays running
    // A move: the last burst job jumps to the head.
    const last = burst[burst.length - 1]!;
    await append(node, last.job_id, 'job.moved', { priority: 0, position: -1 });
  }
  clock.advance(15_000); // half the delay: the delayed jobs are still apart
  return keys;
}

/** Collects a pino logger's lines as parsed objects. */
function lineSink(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) lines.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  });
  return { logger: pino<never>({ level: 'info' }, stream), lines };
}

describe('replay equals live', () => {
  test('a node answers commands as soon as startNode resolves (its subscription has reached the server)', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const failures: string[] = [];
    for (let i = 0; i < 20; i++) {
      const node = await startTrackedNode(server, { clock, nodeName: `early-${i}` }, { awaitServing: false });
      try {
        // A client on another connection, right away: nothing else serves docket.cmd.> here.
        await client.progress(queue);
      } catch (err) {
        failures.push(`start ${i}: ${(err as Error).message}`);
      } finally {
        await node.close();
      }
    }
    expect(failures).toEqual([]);
  });

  test('a start that fails after connecting leaves no connection or consumer behind', async ({ task }) => {
    const writer = await startTrackedNode(server, { clock, nodeName: 'writes-first' });
    await client.submit({ queue: uniqueQueue(task.name) }).finally(() => writer.close());
    // The first checkpoint is written before serving; under a regular file it cannot be.
    const dir = await mkdtemp(join(tmpdir(), 'docket-failed-start-'));
    dirs.push(dir);
    await writeFile(join(dir, 'not-a-dir'), '');
    const dataDir = join(dir, 'not-a-dir', 'data');
    const consumers = async (): Promise<number> => (await jsm.consumers.list('DOCKET').next()).length;
    const consumersBefore = await consumers();
    // Its own connections: closed (the server may take a moment to drop them from connz).
    await expect(startNode({ servers: server.url, nodeName: 'fails', clock, dataDir, checkpointEveryEvents: 1 })).rejects.toMatchObject({ code: 'ENOTDIR' });
    await vi.waitFor(async () => {
      const connz = (await (await fetch(`http://127.0.0.1:${server.monitorPort}/connz?limit=1024`)).json()) as { connections?: { name?: string }[] };
      expect((connz.connections ?? []).map((c) => c.name).filter((n) => n?.startsWith('docket-fails'))).toEqual([]);
    });
    // Given a connection (left open), its tail follows the stream: the consumer is deleted.
    await expect(startNode({ nc, nodeName: 'fails-on-nc', clock, dataDir, checkpointEveryEvents: 1 })).rejects.toMatchObject({ code: 'ENOTDIR' });
    expect(await consumers()).toBe(consumersBefore);
    expect(nc.isClosed()).toBe(false);
  });

  test('a new node on the same stream (no dataDir) folds the log to exactly the live projections', async ({ task }) => {
    const queues = [uniqueQueue(task.name), uniqueQueue(`${task.name}-b`)];
    const live = await startTrackedNode(server, { clock, nodeName: 'live' });
    let keys: KeyRef[];
    try {
      keys = await mixedWorkload(live, queues, 'p1');
      await caughtUp(live, jsm);
      // Sanity: the workload reached every state it meant to.
      const statuses = new Set([...live.store.values()].filter((r) => queues.includes(r.queue)).map((r) => r.state.job.value));
      expect([...statuses].sort()).toEqual(['cancelled', 'failed', 'queued', 'running', 'skipped', 'succeeded']);
    } finally {
      await live.close();
    }
    const liveView = captureProjections(live, undefined, keys);
    expect(liveView.queueOrder[queues[0]!]!.delayed.length).toBeGreaterThan(0);

    const replayed = await startTrackedNode(server, { clock, nodeName: 'replayed' });
    try {
      expect(captureProjections(replayed, undefined, keys)).toEqual(liveView);
      expect(replayed.store.refused).toBe(0);
      // And the clock moving on moves both the same way.
      clock.advance(15_000);
      expect(captureProjections(replayed, undefined, keys).queueOrder).toEqual(captureProjections(live, undefined, keys).queueOrder);
    } finally {
      await replayed.close();
    }
  });

  test('a checkpoint is written once checkpointEveryEvents events are folded, however few commits hold them', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { logger, lines } = lineSink();
    const node = await startTrackedNode(server, { clock, nodeName: 'cadence', dataDir: await tempDir(), checkpointEveryEvents: 200, logger });
    try {
      // 250 events in one request: one commit, or a few, far under 200 of them.
      await client.submitBatch(Array.from({ length: 250 }, (_, i) => ({ queue, params: { i } })));
      const end = await lastSeq(jsm);
      await caughtUp(node, jsm);
      await vi.waitFor(() => expect(lines.some((l) => l['msg'] === 'checkpoint written' && (l['seq'] as number) >= end)).toBe(true), { timeout: 10_000 });
    } finally {
      await node.close();
    }
  });

  test('a checkpoint written mid-way plus the tail equals a replay from zero and the live node', async ({ task }) => {
    const queues = [uniqueQueue(task.name)];
    const liveDir = await tempDir();
    const midDir = await tempDir();
    const live = await startTrackedNode(server, { clock, nodeName: 'live-cp', dataDir: liveDir });
    let keys: KeyRef[];
    let midSeq: number;
    try {
      keys = await mixedWorkload(live, queues, 'p1');
      // A burst right before the checkpoint: its acks may be applied ahead of the tail, so the
      // checkpoint can hold records newer than its own sequence.
      await Promise.all(Array.from({ length: 30 }, (_, i) => client.submit({ queue: queues[0]!, params: { pre: i } })));
      await live.checkpoint();
      // The checkpoint is JSON lines; its last line seals the sequence it covers.
      const cpLines = (await readFile(join(liveDir, 'checkpoint.json'), 'utf8')).split('\n').filter(Boolean);
      midSeq = (JSON.parse(cpLines.at(-1)!) as { seal: number }).seal;
      await mkdir(midDir, { recursive: true });
      await copyFile(join(liveDir, 'checkpoint.json'), join(midDir, 'checkpoint.json'));
      // After the checkpoint: new jobs, and transitions of jobs the checkpoint holds.
      keys.push(...(await mixedWorkload(live, queues, 'p2')));
      const held = [...live.store.values()].filter((r) => r.queue === queues[0] && r.state.job.value === 'queued' && r.seq <= midSeq).slice(0, 5);
      for (const r of held) await client.cancel(r.jobId);
      for (const ref of keys.slice(0, 5)) await client.submit({ queue: ref.queue, key: ref.key as string, priority: 3 });
      await caughtUp(live, jsm);
    } finally {
      await live.close();
    }
    const liveView = captureProjections(live, undefined, keys);
    const end = await lastSeq(jsm);
    expect(midSeq).toBeLessThan(end);

    const { logger, lines } = lineSink();
    const fromMid = await startTrackedNode(server, { clock, nodeName: 'from-mid', dataDir: midDir, logger });
    try {
      expect(lines.find((l) => l['msg'] === 'checkpoint restored')).toMatchObject({ seq: midSeq });
      expect(lines.find((l) => l['msg'] === 'log folded')).toMatchObject({ events: end - midSeq });
      expect(captureProjections(fromMid, undefined, keys)).toEqual(liveView);
    } finally {
      await fromMid.close();
    }

    const fromZero = await startTrackedNode(server, { clock, nodeName: 'from-zero' });
    try {
      expect(captureProjections(fromZero, undefined, keys)).toEqual(liveView);
    } finally {
      await fromZero.close();
    }

    // The live node's file: the whole write above, then the segment its close appended (only
    // the jobs changed since). Both restored together are the live state, with nothing to fold.
    const seals = (await readFile(join(liveDir, 'checkpoint.json'), 'utf8')).split('\n').filter((l) => l.startsWith('{"seal"'));
    expect(seals.length).toBeGreaterThanOrEqual(2);
    const endLines = lineSink();
    const fromEnd = await startTrackedNode(server, { clock, nodeName: 'from-end', dataDir: liveDir, logger: endLines.logger });
    try {
      expect(endLines.lines.find((l) => l['msg'] === 'checkpoint restored')).toMatchObject({ seq: end });
      expect(endLines.lines.find((l) => l['msg'] === 'log folded')).toMatchObject({ events: 0 });
      expect(captureProjections(fromEnd, undefined, keys)).toEqual(liveView);
    } finally {
      await fromEnd.close();
    }

    // fromMid's close appended its tail to the copied file: restoring that file again is also live.
    const midAgain = await startTrackedNode(server, { clock, nodeName: 'from-mid-again', dataDir: midDir });
    try {
      expect(captureProjections(midAgain, undefined, keys)).toEqual(liveView);
    } finally {
      await midAgain.close();
    }
  });

  test('commands after a replay behave as on the live node: keys, command ids, cancels', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await startTrackedNode(server, { clock, nodeName: 'before' });
    let keyed: string;
    let cancelled: string;
    try {
      keyed = (await client.submit({ queue, key: 'k' })).job_id;
      cancelled = (await client.submit({ queue, key: 'gone' })).job_id;
      await client.cancel(cancelled);
    } finally {
      await first.close();
    }
    const second = await startTrackedNode(server, { clock, nodeName: 'after' });
    try {
      expect(await client.submit({ queue, key: 'k' })).toEqual({ job_id: keyed, status: 'queued', created: false });
      const again = await client.submit({ queue, key: 'gone' });
      expect(again.created).toBe(true);
      expect(again.job_id).not.toBe(cancelled);
      expect((await client.cancel(cancelled).catch((err: DocketError) => err)) as DocketError).toMatchObject({ code: 'invalid_transition' });
    } finally {
      await second.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Property: random command sequences, then a fresh node's projections equal the live node's.

type Command =
  | { readonly kind: 'submit'; readonly key: string | null; readonly priority: number | undefined; readonly delayMs: number | undefined; readonly withId: boolean }
  | { readonly kind: 'batch'; readonly size: number; readonly key: string | null }
  | { readonly kind: 'cancel'; readonly pick: number; readonly withId: boolean }
  | { readonly kind: 'claim'; readonly pick: number }
  | { readonly kind: 'end'; readonly pick: number; readonly how: 'succeeded' | 'failed' | 'skipped' }
  | { readonly kind: 'advance'; readonly ms: number }
  | { readonly kind: 'bulk'; readonly verb: 'retry_all' | 'cancel_all' | 'clean'; readonly status: string; readonly withId: boolean };

const keyArb = fc.option(fc.constantFrom('a', 'b', 'c'), { nil: null, freq: 2 });
const commandArb: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('submit' as const), key: keyArb, priority: fc.option(fc.integer({ min: 0, max: 255 }), { nil: undefined }), delayMs: fc.option(fc.constantFrom(0, 1000, 5000, 60_000), { nil: undefined }), withId: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('batch' as const), size: fc.integer({ min: 1, max: 8 }), key: keyArb }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat(), withId: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('claim' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('end' as const), pick: fc.nat(), how: fc.constantFrom('succeeded' as const, 'failed' as const, 'skipped' as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.constantFrom(500, 2000, 30_000) }) },
  {
    weight: 1,
    arbitrary: fc.oneof(
      fc.record({ kind: fc.constant('bulk' as const), verb: fc.constant('retry_all' as const), status: fc.constant(''), withId: fc.boolean() }),
      fc.record({ kind: fc.constant('bulk' as const), verb: fc.constant('cancel_all' as const), status: fc.constantFrom('queued', 'delayed'), withId: fc.boolean() }),
      fc.record({ kind: fc.constant('bulk' as const), verb: fc.constant('clean' as const), status: fc.constantFrom('succeeded', 'failed', 'cancelled', 'skipped'), withId: fc.boolean() }),
    ),
  },
);
/** Groups of commands; the commands of a group are sent at once. */
const programArb = fc.array(fc.array(commandArb, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 10 });

describe('replay equals live, for random command sequences', () => {
  let live: DocketNode;
  beforeAll(async () => {
    live = await startTrackedNode(server, { clock, nodeName: 'prop-live' });
  });
  afterAll(async () => {
    await live?.close();
  });

  let run = 0;
  fcTest.prop([programArb], { numRuns: NUM_RUNS })(
    'a fresh node folds the log to the live node\'s projections',
    async (program) => {
      const queue = `prop-${++run}-${Math.random().toString(36).slice(2, 8)}`;
      const jobs: string[] = [];
      const runs = new Map<string, string>();
      let cmd = 0;
      const exec = async (c: Command): Promise<void> => {
        const n = ++cmd;
        switch (c.kind) {
          case 'submit': {
            const r = await client.submit({
              queue,
              ...(c.key === null ? {} : { key: c.key }),
              ...(c.priority === undefined ? {} : { priority: c.priority }),
              ...(c.delayMs === undefined ? {} : { delay_ms: c.delayMs }),
              ...(c.withId ? { id: `${queue}-s${n}` } : {}),
            });
            jobs.push(r.job_id);
            return;
          }
          case 'batch': {
            const { jobs: rs } = await client.submitBatch(Array.from({ length: c.size }, (_, i) => ({ queue, ...(c.key === null || i > 0 ? {} : { key: c.key }) })), { id: `${queue}-b${n}` });
            jobs.push(...okIds(rs));
            return;
          }
          case 'cancel': {
            const jobId = jobs[c.pick % Math.max(1, jobs.length)];
            if (jobId) await client.cancel(jobId, c.withId ? { id: `${queue}-c${n}` } : {});
            return;
          }
          case 'claim': {
            const jobId = jobs[c.pick % Math.max(1, jobs.length)];
            if (!jobId) return;
            const runId = `${jobId}-r${n}`;
            await append(live, jobId, 'job.claimed', claimData(runId));
            runs.set(jobId, runId);
            return;
          }
          case 'end': {
            const jobId = jobs[c.pick % Math.max(1, jobs.length)];
            const runId = jobId === undefined ? undefined : runs.get(jobId);
            if (!jobId || !runId) return;
            if (c.how === 'succeeded') await append(live, jobId, 'job.succeeded', { run_id: runId, result: n });
            else if (c.how === 'failed') await append(live, jobId, 'job.failed', { run_id: runId, reason: 'error', error: { message: `e${n}` } });
            else await append(live, jobId, 'job.skipped', { run_id: runId, reason: null });
            return;
          }
          case 'advance':
            clock.advance(c.ms);
            return;
          case 'bulk': {
            // A bulk command on a queue no job was submitted to yet is refused (unknown queue).
            if (jobs.length === 0) return;
            const id = c.withId ? { id: `${queue}-x${n}` } : {};
            if (c.verb === 'retry_all') jobs.push(...(await client.retryAll({ queue, ...id })).job_ids);
            else if (c.verb === 'cancel_all') await client.cancelAll({ queue, status: c.status as 'queued' | 'delayed', ...id });
            else await client.clean({ queue, status: c.status as 'succeeded', older_than_ms: 0, ...id });
            return;
          }
        }
      };
      for (const group of program) {
        const settled = await Promise.allSettled(group.map(exec));
        for (const s of settled) {
          // Refusals (cancel of an ended job, claim of a running one...) are part of the game.
          if (s.status === 'rejected' && !(s.reason instanceof DocketError && ['invalid_transition', 'stale_run', 'not_found'].includes(s.reason.code))) throw s.reason;
        }
      }
      await caughtUp(live, jsm);
      const keys: KeyRef[] = ['a', 'b', 'c'].map((key) => ({ queue, key }));
      const fresh = await startTrackedNode(server, { clock, nodeName: `prop-fresh-${run}` });
      try {
        // A reactor of the live node (a lease lapsing after the last clock move) may still commit
        // after the program: compare once both have folded the same log.
        await vi.waitFor(async () => {
          await caughtUp(live, jsm);
          await caughtUp(fresh, jsm);
          expect(captureProjections(fresh, [queue], keys)).toEqual(captureProjections(live, [queue], keys));
        }, { timeout: 10_000, interval: 100 });
        expect(captureProjections(fresh, undefined, keys).progress).toEqual(captureProjections(live, undefined, keys).progress);
        // Every event appended was legal, bulk commands racing the others included.
        expect(fresh.store.refused).toBe(0);
      } finally {
        await fresh.close();
      }
    },
    120_000,
  );
});

// ---------------------------------------------------------------------------------------------
// Last in the file: it purges part of the shared stream.

describe('start-up on a stream with gaps', () => {
  test('a node starts on a stream whose last events were purged (an operator dropped a queue\'s history)', async ({ task }) => {
    const keep = uniqueQueue(task.name);
    const old = uniqueQueue(`${task.name}-old`);
    const writer = await startTrackedNode(server, { clock, nodeName: 'gap-writer' });
    try {
      await client.submit({ queue: keep });
      await client.submit({ queue: old });
    } finally {
      await writer.close();
    }
    await jsm.streams.purge('DOCKET', { filter: subjects.partition(queuePartition(old)) });
    const info = await jsm.streams.info('DOCKET');
    expect(info.state.last_seq).toBeGreaterThan(0);
    // The last sequence now names no message: a start-up that waits for the tail to reach it waits forever.
    const starting = startTrackedNode(server, { clock, nodeName: 'gap-reader' });
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      starting.then(() => 'started' as const),
      new Promise<'stuck'>((resolve) => (timer = setTimeout(() => resolve('stuck'), 5_000))),
    ]);
    clearTimeout(timer);
    if (outcome === 'stuck') {
      // Unblock it (a message past the gap) so that it can be closed, then report.
      await jetstream(nc).publish(subjects.partition(queuePartition(`${old}-unblock`)), 'x');
    }
    const node = await starting;
    try {
      expect(outcome).toBe('started');
      expect(node.store.get((await client.list({ queue: keep })).jobs[0]?.job_id ?? '')).toBeDefined();
    } finally {
      await node.close();
    }
  });
});
