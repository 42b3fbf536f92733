/**
 * A model-based test of the worker protocol against the live system (issue 3): random command
 * sequences (submit with priorities, delays and retry policies; claim by one of two workers; two
 * workers racing; complete; fail; heartbeat; advance the clock past leases; stale or resent
 * completions; cancel; move; restart or crash a node) run both on a small in-memory model and on
 * one or two real nodes sharing one stream, on a ManualClock.
 *
 * Invariants checked:
 * - claims come out in the model's queue order (priority, position, submit sequence; due jobs);
 * - a stale run's completion is refused with stale_run and appends nothing; a resend of an
 *   accepted completion is answered again and appends nothing;
 * - lapses and retries (ids derived, run_at = failure time + backoff) happen exactly as modelled;
 * - after every command, and in particular after a restart or crash, every node's statuses of
 *   the queue's jobs equal the model's, and a restarted node folded the end of the log entirely;
 * - the log never shows two open runs for one job, holds exactly the model's claims, and passes
 *   docket audit.
 *
 * numRuns comes from DOCKET_NUM_RUNS (default 15); each run takes a fresh queue and fresh nodes.
 * A failure prints its seed and path: DOCKET_MODEL_SEED and DOCKET_MODEL_PATH replay it;
 * DOCKET_MODEL_TRACE=1 writes each command to stderr as it starts, DOCKET_MODEL_LOG=<file> the
 * nodes' debug logs.
 */
import { openSync } from 'node:fs';
import { afterAll, beforeAll, expect } from 'vitest';
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import type { JetStreamManager } from '@nats-io/jetstream';
import { backoffDelayMs, type BackoffPolicy } from '../../machines/index.js';
import type { Client } from '../../src/client/client.js';
import { ManualClock, toIso } from '../../src/clock.js';
import { retryJobId } from '../../src/ids.js';
import { createLogger } from '../../src/logger.js';
import { subjects } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { lastSeq as lastSeqOf, readLog } from '../../src/store/read-log.js';
import { auditMessages } from '../../src/audit/audit.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { caughtUp, openResources, queueLog, startTrackedNode, uniqueQueue, closeTestFile, connectTestClients } from '../support/docket.js';
import { complete, doubleOpenRuns, fail, fence, leadNow, ok, resendOnUnavailable, statuses, until, work, type WorkReply } from '../support/worker-helpers.js';

const numRuns = Number(process.env['DOCKET_NUM_RUNS'] ?? 15);
/** Replays a failure: DOCKET_MODEL_SEED and DOCKET_MODEL_PATH from its report. */
const replay = {
  ...(process.env['DOCKET_MODEL_SEED'] === undefined ? {} : { seed: Number(process.env['DOCKET_MODEL_SEED']) }),
  ...(process.env['DOCKET_MODEL_PATH'] === undefined ? {} : { path: process.env['DOCKET_MODEL_PATH'], endOnFailure: true }),
};
const LEASE_MS = 1_000;

let server: TestNatsServer;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-05-01T00:00:00.000Z'));
let nodeSerial = 0;

beforeAll(async () => {
  server = await startNatsServer();
  ({ client, nc, jsm } = await connectTestClients(server, 'worker-model-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, server });
});

// ---------------------------------------------------------------------------------------------
// The model.

type Status = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

interface MJob {
  readonly id: string;
  priority: number;
  /** Stream sequence of its job.submitted: the last part of the order key. */
  seq: number;
  /** The middle part of the order key: its seq until a move gives it another (DESIGN: position). */
  position: number | null;
  status: Status;
  readonly runAt: number;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly backoff: BackoffPolicy;
  runId: string | null;
  leaseExpiresAt: number;
}

type RunEnd = 'open' | 'completed' | 'failed' | 'lapsed' | 'cancelled';
interface MRun {
  readonly runId: string;
  readonly jobId: string;
  end: RunEnd;
}

function positionOf(j: MJob): number {
  return j.position ?? j.seq;
}
function byOrderKey(a: MJob, b: MJob): number {
  return a.priority - b.priority || positionOf(a) - positionOf(b) || a.seq - b.seq;
}

class Model {
  readonly jobs = new Map<string, MJob>();
  readonly runs: MRun[] = [];

  bySeq(): MJob[] {
    return [...this.jobs.values()].sort((a, b) => a.seq - b.seq);
  }
  /** The queue order: queued jobs whose run_at has come, by (priority, position, seq). */
  ready(): MJob[] {
    const now = clock.now();
    return this.queued().filter((j) => j.runAt <= now);
  }
  /** Every queued job (due or not) in order-key order. */
  queued(): MJob[] {
    return this.bySeq().filter((j) => j.status === 'queued').sort(byOrderKey);
  }
  running(): MJob[] {
    return this.bySeq().filter((j) => j.status === 'running');
  }
  live(): MJob[] {
    return this.bySeq().filter((j) => j.status === 'queued' || j.status === 'running');
  }
  closedRuns(): MRun[] {
    return this.runs.filter((r) => r.end !== 'open');
  }
  run(runId: string): MRun {
    return this.runs.find((r) => r.runId === runId)!;
  }
  statuses(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const j of [...this.jobs.values()].sort((a, b) => (a.id < b.id ? -1 : 1))) out[j.id] = j.status;
    return out;
  }
  /** The retry a failure at `now` creates, if any (machines/retry-policy.ts's rule). */
  retryOf(job: MJob, retryable: boolean | undefined): MJob | null {
    if (retryable === false || job.attempt >= job.maxAttempts) return null;
    const id = retryJobId(job.id, job.attempt);
    return {
      id,
      priority: job.priority,
      seq: Number.NaN, // learnt from the stream once created
      position: null,
      status: 'queued',
      runAt: clock.now() + backoffDelayMs(job.backoff, job.attempt, job.id),
      attempt: job.attempt + 1,
      maxAttempts: job.maxAttempts,
      backoff: job.backoff,
      runId: null,
      leaseExpiresAt: 0,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// The real system: one or two nodes on the file's server, one queue.

interface Real {
  readonly queue: string;
  readonly nodes: DocketNode[];
}

/**
 * Each model node runs on a connection of its own that the test can cut (a crash: nothing given
 * up, nothing drained). A crashed leader's queue lease runs out after LEADERSHIP_LEASE_MS of
 * wall-clock time; the model clock does not move meanwhile.
 */
const LEADERSHIP_LEASE_MS = 2_000;
const connections = new WeakMap<DocketNode, NatsConnection[]>();
/**
 * The nodes append on a noEcho connection of their own and their tails switch between following
 * the stream and solo (LogTail) every few milliseconds, so the races run across switches.
 */
const TAIL_SWITCHING = { soloAfterMs: 10, checkEveryMs: 5 };

/** With DOCKET_MODEL_LOG=<file>, the nodes log there at debug level (pino JSON lines). */
const nodeLogger = process.env['DOCKET_MODEL_LOG'] === undefined ? undefined : createLogger({ level: 'debug', fd: openSync(process.env['DOCKET_MODEL_LOG'], 'a') });

/** startNode folds the log before it resolves; this long is a stalled fold, not a slow one. */
const START_DEADLINE_MS = 15_000;

async function startModelNode(): Promise<DocketNode> {
  const name = `model-${++nodeSerial}`;
  trace(`start node ${name}`);
  const own = await connect({ servers: server.url, name: `docket-${name}` });
  const appends = await connect({ servers: server.url, name: `docket-${name}-appends`, noEcho: true });
  const starting = startTrackedNode(server, { clock, nodeName: name, nc: own, appendNc: appends, tail: TAIL_SWITCHING, leadershipLeaseMs: LEADERSHIP_LEASE_MS, ...(nodeLogger ? { logger: nodeLogger } : {}) }).then((node) => {
    connections.set(node, [own, appends]);
    return node;
  });
  let timer: NodeJS.Timeout | undefined;
  const started = await Promise.race([starting, new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), START_DEADLINE_MS)))]);
  clearTimeout(timer);
  if (started === null) {
    void starting.then((late) => stopModelNode(late)); // do not leak it into the next run
    throw new Error(`startNode of ${name} did not resolve in ${START_DEADLINE_MS} ms: its fold of the log stalled`);
  }
  return started;
}

/** Closes a node and then its connection (the node does not own it). */
async function stopModelNode(node: DocketNode): Promise<void> {
  try {
    await node.close();
  } finally {
    for (const own of connections.get(node) ?? []) if (!own.isClosed()) await own.close();
  }
}

/**
 * The restarted node folded the end of the log completely: every job subject among the last
 * events of the stream (all queues, not only this run's) is at its last event in the node's
 * store. A tail that ends its start-up fold early skips exactly these.
 */
async function expectFoldedEndOfLog(node: DocketNode): Promise<void> {
  await caughtUp(node, jsm);
  const last = (await jsm.streams.info('DOCKET')).state.last_seq;
  const lastBySubject = new Map<string, number>();
  for await (const m of readLog(nc, { fromSeq: Math.max(1, last - 2_000), toSeq: last, filter: subjects.jobs() })) lastBySubject.set(m.subject, m.seq);
  const behind: string[] = [];
  for (const [subject, seq] of lastBySubject) {
    const jobId = subject.split('.')[4]!;
    const folded = node.store.get(jobId)?.seq;
    if (folded !== seq) behind.push(`${subject}: log at ${seq}, ${node.name} at ${folded ?? 'nothing'}`);
  }
  expect(behind, `${node.name} skipped events at the end of the log`).toEqual([]);
}

function leaderOf(real: Real): DocketNode | undefined {
  return real.nodes.find((n) => n.leadership.isLeader(real.queue));
}

/** Every node has folded everything on the stream. */
async function sync(real: Real): Promise<void> {
  for (const node of real.nodes) await caughtUp(node, jsm);
}

/** The last sequence on the queue's subjects (for "nothing was appended"). */
function queueSeq(real: Real): Promise<number> {
  return lastSeqOf(nc, subjects.jobs(real.queue));
}

async function expectStatuses(model: Model, real: Real, when: string): Promise<void> {
  await sync(real);
  for (const node of real.nodes) expect(statuses(node, real.queue), `${node.name} ${when}`).toEqual(model.statuses());
}

/** Adds the retries a failure made to the model, once they are on the leader's store, checking id, run_at and order key. */
async function awaitRetries(model: Model, real: Real, retries: MJob[]): Promise<void> {
  if (retries.length === 0) return;
  const leader = leaderOf(real);
  if (!leader) throw new Error('a failure happened with no leader');
  await until(leader, (store) => retries.every((r) => store.get(r.id) !== undefined), `retries ${retries.map((r) => r.id).join(', ')}`);
  for (const retry of retries) {
    const record = leader.store.get(retry.id)!;
    expect(record.state.job.context).toMatchObject({ attempt: retry.attempt, priority: retry.priority, run_at: toIso(retry.runAt) });
    retry.seq = record.submitSeq;
    model.jobs.set(retry.id, retry);
  }
}

/**
 * Work requests as a conforming client sends them: resent while the reply is `unavailable`
 * (e.g. a follower still forwarding to a leader that closed; claim-flow and workers tests hold
 * that bug's own failing test). Resends are safe: completions are idempotent by run id.
 */
const unavailable: string[] = [];
const tracing = process.env['DOCKET_MODEL_TRACE'] !== undefined;
/** With DOCKET_MODEL_TRACE set, each command is written to stderr as it starts. */
function trace(what: string): void {
  if (tracing) process.stderr.write(`[model ${new Date().toISOString()}] ${what}\n`);
}
function send<T>(request: () => Promise<WorkReply<T>>): Promise<WorkReply<T>> {
  return resendOnUnavailable(request, (error) => unavailable.push(error.message));
}
async function claimJobs(r: Real, worker: string, max: number): Promise<{ job_id: string; run_id: string; attempt: number }[]> {
  const reply = await send(() => work<{ jobs: { job_id: string; run_id: string; attempt: number }[] }>(nc, r.queue, 'claim', { worker, max, wait_ms: 0, lease_ms: LEASE_MS }));
  return ok(reply).jobs;
}

// ---------------------------------------------------------------------------------------------
// Commands.

type Cmd = fc.AsyncCommand<Model, Real>;

class Submit implements Cmd {
  constructor(
    readonly priority: number,
    readonly maxAttempts: number,
    readonly baseMs: number,
    readonly delayMs: number,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.jobs.size < 30;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    const backoff = { base_ms: this.baseMs, max_ms: 5_000, jitter: 0.5 };
    const reply = await client.submit({ queue: r.queue, priority: this.priority, max_attempts: this.maxAttempts, backoff, ...(this.delayMs > 0 ? { delay_ms: this.delayMs } : {}) });
    expect(reply).toMatchObject({ status: 'queued', created: true });
    await sync(r);
    const seq = r.nodes[0]!.store.get(reply.job_id)!.submitSeq;
    m.jobs.set(reply.job_id, { id: reply.job_id, priority: this.priority, seq, position: null, status: 'queued', runAt: clock.now() + this.delayMs, attempt: 1, maxAttempts: this.maxAttempts, backoff, runId: null, leaseExpiresAt: 0 });
    await expectStatuses(m, r, 'after submit');
  }
  toString(): string {
    return `submit(p${this.priority}, max_attempts ${this.maxAttempts}, base ${this.baseMs}${this.delayMs > 0 ? `, delay ${this.delayMs}` : ''})`;
  }
}

function openRuns(m: Model, jobs: readonly { job_id: string; run_id: string; attempt: number }[]): void {
  for (const claimed of jobs) {
    const job = m.jobs.get(claimed.job_id)!;
    expect(claimed.attempt).toBe(job.attempt);
    job.status = 'running';
    job.runId = claimed.run_id;
    job.leaseExpiresAt = clock.now() + LEASE_MS;
    m.runs.push({ runId: claimed.run_id, jobId: job.id, end: 'open' });
  }
}

class Claim implements Cmd {
  constructor(
    readonly worker: 'w1' | 'w2',
    readonly max: number,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const expected = m.ready().slice(0, this.max).map((j) => j.id);
    const jobs = await claimJobs(r, this.worker, this.max);
    expect(jobs.map((j) => j.job_id), 'claims in the model\'s queue order').toEqual(expected);
    openRuns(m, jobs);
    await expectStatuses(m, r, 'after claim');
  }
  toString(): string {
    return `claim(${this.worker}, max ${this.max})`;
  }
}

class RacingClaims implements Cmd {
  constructor(
    readonly max1: number,
    readonly max2: number,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const ready = m.ready().map((j) => j.id);
    const [a, b] = await Promise.all([claimJobs(r, 'w1', this.max1), claimJobs(r, 'w2', this.max2)]);
    const ids1 = a.map((j) => j.job_id);
    const ids2 = b.map((j) => j.job_id);
    // Claims are served oldest first: whichever arrived first took the head of the queue.
    const w1First = ids1.length === Math.min(this.max1, ready.length) && [...ids1, ...ids2].join() === ready.slice(0, ids1.length + ids2.length).join() && ids2.length === Math.min(this.max2, ready.length - ids1.length);
    const w2First = ids2.length === Math.min(this.max2, ready.length) && [...ids2, ...ids1].join() === ready.slice(0, ids1.length + ids2.length).join() && ids1.length === Math.min(this.max1, ready.length - ids2.length);
    expect(w1First || w2First, `racing claims ${JSON.stringify({ ids1, ids2, ready })}`).toBe(true);
    openRuns(m, a);
    openRuns(m, b);
    await expectStatuses(m, r, 'after racing claims');
  }
  toString(): string {
    return `racingClaims(w1 max ${this.max1}, w2 max ${this.max2})`;
  }
}

class Complete implements Cmd {
  constructor(readonly pick: number) {}
  check(m: Readonly<Model>): boolean {
    return m.running().length > 0;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const running = m.running();
    const job = running[this.pick % running.length]!;
    const reply = await send(() => complete(nc, r.queue, { job_id: job.id, run_id: job.runId! }, { pick: this.pick }));
    expect(reply).toEqual({ ok: true, job_id: job.id, status: 'succeeded' });
    job.status = 'succeeded';
    m.run(job.runId!).end = 'completed';
    await expectStatuses(m, r, 'after complete');
  }
  toString(): string {
    return `complete(#${this.pick})`;
  }
}

class Fail implements Cmd {
  constructor(
    readonly pick: number,
    readonly retryable: boolean,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.running().length > 0;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const running = m.running();
    const job = running[this.pick % running.length]!;
    const reply = await send(() => fail(nc, r.queue, { job_id: job.id, run_id: job.runId! }, { message: 'model failure', retryable: this.retryable }));
    expect(reply).toEqual({ ok: true, job_id: job.id, status: 'failed' });
    job.status = 'failed';
    m.run(job.runId!).end = 'failed';
    const retry = m.retryOf(job, this.retryable);
    await awaitRetries(m, r, retry ? [retry] : []);
    await expectStatuses(m, r, 'after fail');
  }
  toString(): string {
    return `fail(#${this.pick}, retryable ${this.retryable})`;
  }
}

class Heartbeat implements Cmd {
  constructor(
    readonly picks: readonly number[],
    readonly withStale: boolean,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.running().length > 0;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const running = m.running();
    const beating = [...new Set(this.picks.map((p) => running[p % running.length]!))];
    const stale = this.withStale ? m.closedRuns()[0] : undefined;
    const runIds = [...beating.map((j) => j.runId!), ...(stale ? [stale.runId] : [])];
    const lost = ok(await send(() => work<{ lost: string[] }>(nc, r.queue, 'heartbeat', { worker: 'w1', run_ids: runIds }))).lost;
    expect(lost).toEqual(stale ? [stale.runId] : []);
    for (const job of beating) job.leaseExpiresAt = clock.now() + LEASE_MS;
    await expectStatuses(m, r, 'after heartbeat');
  }
  toString(): string {
    return `heartbeat(${this.picks.map((p) => `#${p}`).join(' ')}${this.withStale ? ' + a stale run' : ''})`;
  }
}

class Advance implements Cmd {
  constructor(readonly ms: number) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    clock.advance(this.ms);
    const now = clock.now();
    const lapsing = m.running().filter((j) => j.leaseExpiresAt <= now);
    const retries: MJob[] = [];
    for (const job of lapsing) {
      job.status = 'failed';
      m.run(job.runId!).end = 'lapsed';
      const retry = m.retryOf(job, undefined);
      if (retry) retries.push(retry);
    }
    if (lapsing.length > 0) {
      const leader = leaderOf(r);
      if (!leader) throw new Error('running jobs but no leader');
      await until(leader, (store) => lapsing.every((j) => store.get(j.id)?.state.job.value === 'failed'), `lapses of ${lapsing.map((j) => j.id).join(', ')}`);
      for (const job of lapsing) {
        expect(leader.store.get(job.id)!.state.run.context.failure_reason).toMatch(/^(lease_expired|crash_recovery)$/);
      }
    }
    await awaitRetries(m, r, retries);
    await expectStatuses(m, r, `after advancing ${this.ms} ms`);
  }
  toString(): string {
    return `advance(${this.ms} ms)`;
  }
}

class LateCompletion implements Cmd {
  constructor(
    readonly pick: number,
    readonly asFail: boolean,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.closedRuns().length > 0;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const closed = m.closedRuns();
    const run = closed[this.pick % closed.length]!;
    const before = await queueSeq(r);
    const target = { job_id: run.jobId, run_id: run.runId };
    const reply = await send(() => (this.asFail ? fail(nc, r.queue, target) : complete(nc, r.queue, target)));
    if (run.end === 'completed' && !this.asFail) {
      // A resend of the accepted completion: answered again, nothing appended.
      expect(reply).toEqual({ ok: true, job_id: run.jobId, status: 'succeeded' });
    } else if (run.end === 'failed' && this.asFail) {
      // A resend of the accepted failure: answered again, nothing appended (no second retry).
      expect(reply).toEqual({ ok: true, job_id: run.jobId, status: 'failed' });
    } else {
      expect(reply.ok, `late ${this.asFail ? 'fail' : 'complete'} of a ${run.end} run`).toBe(false);
      if (!reply.ok) expect(reply.error, `late ${this.asFail ? 'fail' : 'complete'} of a ${run.end} run`).toMatchObject({ code: 'stale_run' });
    }
    expect(await queueSeq(r)).toBe(before);
    await expectStatuses(m, r, 'after a late completion');
  }
  toString(): string {
    return `late${this.asFail ? 'Fail' : 'Complete'}(#${this.pick})`;
  }
}

class Cancel implements Cmd {
  constructor(readonly pick: number) {}
  check(m: Readonly<Model>): boolean {
    return m.live().length > 0;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const live = m.live();
    const job = live[this.pick % live.length]!;
    const reply = await client.cancel(job.id);
    expect(reply).toMatchObject({ job_id: job.id, status: 'cancelled' });
    if (job.status === 'running') m.run(job.runId!).end = 'cancelled';
    job.status = 'cancelled';
    await expectStatuses(m, r, 'after cancel');
  }
  toString(): string {
    return `cancel(#${this.pick})`;
  }
}

class Move implements Cmd {
  constructor(
    readonly pick: number,
    readonly anchorPick: number,
    readonly mode: 'before' | 'after' | 'priority',
    readonly priority: number,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.queued().length >= (this.mode === 'priority' ? 1 : 2);
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const queued = m.queued();
    const job = queued[this.pick % queued.length]!;
    if (this.mode === 'priority') {
      const reply = await client.request<{ priority: number }>('move', { job_id: job.id, priority: this.priority });
      expect(reply.priority).toBe(this.priority);
      job.priority = this.priority;
    } else {
      const others = queued.filter((j) => j !== job);
      const anchor = others[this.anchorPick % others.length]!;
      await client.request('move', { job_id: job.id, [this.mode]: anchor.id });
      // The moved job takes the anchor's priority and a position between the anchor and its
      // neighbour on that side among the queued jobs of that priority (src/commands/move.ts).
      const line = others.filter((j) => j.priority === anchor.priority && j !== anchor);
      const side = line.filter((j) => (this.mode === 'before' ? byOrderKey(j, anchor) < 0 : byOrderKey(j, anchor) > 0));
      const neighbour = this.mode === 'before' ? side[side.length - 1] : side[0];
      const at = positionOf(anchor);
      job.priority = anchor.priority;
      job.position = neighbour === undefined ? at + (this.mode === 'before' ? -1 : 1) : (positionOf(neighbour) + at) / 2;
      // What the move promises, whatever the arithmetic: right next to the anchor.
      const after = m.queued();
      expect(after.indexOf(job) - after.indexOf(anchor), 'moved next to its anchor').toBe(this.mode === 'before' ? -1 : 1);
    }
    await sync(r);
    const leader = leaderOf(r) ?? r.nodes[0]!;
    const record = leader.store.get(job.id)!;
    expect({ priority: record.state.job.context.priority, position: record.state.job.context.position ?? record.submitSeq }).toEqual({ priority: job.priority, position: positionOf(job) });
    await expectStatuses(m, r, 'after move');
  }
  toString(): string {
    return this.mode === 'priority' ? `move(#${this.pick}, priority ${this.priority})` : `move(#${this.pick}, ${this.mode} #${this.anchorPick})`;
  }
}

class Restart implements Cmd {
  constructor(
    readonly which: number,
    readonly crash: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    trace(this.toString());
    await sync(r);
    const index = this.which % r.nodes.length;
    const target = r.nodes[index]!;
    const wasLeader = target.leadership.isLeader(r.queue);
    if (this.crash) {
      // Cut its connection: no lease given up, no checkpoint, nothing drained. Then let the
      // node object go (its close() must cope with the dead connection).
      for (const own of connections.get(target)!) await own.close();
      await target.close();
    } else {
      await stopModelNode(target);
    }
    r.nodes[index] = await startModelNode();
    await expectFoldedEndOfLog(r.nodes[index]!);
    await leadNow(nc, r.queue, r.nodes);
    // The node that now leads (the restarted one or the other) adopted every running job with
    // a fresh lease from now (DESIGN: recovery matrix). A follower's restart changes no lease.
    if (wasLeader) for (const job of m.running()) job.leaseExpiresAt = clock.now() + LEASE_MS;
    await expectStatuses(m, r, 'after restart');
  }
  toString(): string {
    return `${this.crash ? 'crash' : 'restart'}(node #${this.which})`;
  }
}

const submitArb = fc
  .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 1, max: 3 }), fc.constantFrom(0, 400), fc.constantFrom(0, 0, 0, 700))
  .map(([p, a, b, d]) => new Submit(p, a, b, d));
const claimArb = fc.tuple(fc.constantFrom('w1' as const, 'w2' as const), fc.integer({ min: 1, max: 3 })).map(([w, max]) => new Claim(w, max));
const completeArb = fc.nat(20).map((p) => new Complete(p));
const failArb = fc.tuple(fc.nat(20), fc.boolean()).map(([p, retryable]) => new Fail(p, retryable));
// fc.commands picks an arbitrary uniformly: repeats weight submits, claims and completions so
// that runs hold enough jobs and runs for the rarer commands to matter.
const commandArbs = [
  submitArb,
  submitArb,
  submitArb,
  submitArb,
  submitArb,
  claimArb,
  claimArb,
  claimArb,
  fc.tuple(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 3 })).map(([a, b]) => new RacingClaims(a, b)),
  completeArb,
  completeArb,
  failArb,
  failArb,
  fc.tuple(fc.array(fc.nat(20), { minLength: 1, maxLength: 3 }), fc.boolean()).map(([picks, stale]) => new Heartbeat(picks, stale)),
  fc.constantFrom(200, 500, 1_000, 1_500).map((ms) => new Advance(ms)),
  fc.tuple(fc.nat(20), fc.boolean()).map(([p, asFail]) => new LateCompletion(p, asFail)),
  fc.nat(20).map((p) => new Cancel(p)),
  fc.tuple(fc.nat(1), fc.integer({ min: 0, max: 3 })).map(([w, c]) => new Restart(w, c === 0)),
  fc.tuple(fc.nat(20), fc.nat(20), fc.constantFrom('before' as const, 'after' as const, 'priority' as const), fc.integer({ min: 0, max: 3 })).map(([p, a, mode, pr]) => new Move(p, a, mode, pr)),
];

fcTest.prop([fc.boolean(), fc.commands(commandArbs, { maxCommands: 60, size: 'max' })], { numRuns, timeout: 60_000, ...replay })(
  'the worker protocol follows the model: queue order, fencing, leases, retries, recovery',
  async (twoNodes, cmds) => {
    const real: Real = { queue: uniqueQueue('model'), nodes: [] };
    try {
      real.nodes.push(await startModelNode());
      if (twoNodes) real.nodes.push(await startModelNode());
      const model = new Model();
      await fc.asyncModelRun(() => ({ model, real }), cmds);
      if (tracing) console.log(`${twoNodes ? 2 : 1} node(s): ${String(cmds)} | jobs ${model.jobs.size} runs ${model.runs.length} | unavailable so far ${unavailable.length}`);

      // Nothing left in flight: every reactor's append is on the stream, then compare again.
      const leader = leaderOf(real);
      trace(`end: fence ${leader?.name ?? '(no leader)'}`);
      if (leader) await fence(leader);
      trace('end: statuses');
      await expectStatuses(model, real, 'at the end');
      trace('end: log');
      const log = await queueLog(nc, real.queue);
      expect(doubleOpenRuns(log), 'two open runs for one job').toEqual([]);
      const messages = [];
      for await (const m of readLog(nc, { filter: subjects.jobs(real.queue) })) messages.push(m);
      const audit = auditMessages(messages);
      expect(audit.violations, 'docket audit of the run\'s queue').toEqual([]);
      expect(log.filter((e) => e.type === 'job.claimed').map((e) => String(e.data['run_id'])).sort(), 'the claims on the log are the model\'s').toEqual(model.runs.map((run) => run.runId).sort());

      // Leave nothing live: no lease of this run may lapse in a later one.
      trace('end: cancel live jobs');
      for (const job of model.live()) await client.cancel(job.id);
      if (leader) await until(leader, () => leader.leases.size === 0, 'no lease left');
    } finally {
      trace('end: close nodes');
      for (const node of real.nodes) await stopModelNode(node);
      trace('end: closed');
      expect(openResources()).toEqual([]);
    }
  },
  600_000,
);
