/**
 * Helpers for the worker-protocol tests (claim flow, Worker SDK, model test): raw
 * `docket.work.<queue>.<verb>` requests, waiting on a node's store without sleeping, reading
 * events from the stream, the "never two open runs" check over a queue's log, and a fence that
 * makes every append a node has already started visible.
 *
 * Nothing here sleeps to wait for an effect: waits are on store changes or stream messages,
 * each with a deadline that fails the test with what it was waiting for.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import { Client, type RecordedEvent } from '../../src/client/client.js';
import type { ClaimedJob } from '../../src/commands/schemas.js';
import type { ErrorBody } from '../../src/errors.js';
import { subjects, type WorkVerb } from '../../src/nats/subjects.js';
import { commitSeqOf } from '../../machines/index.js';
import type { DocketNode } from '../../src/node.js';
import type { JobRecord, JobStore } from '../../src/store/job-store.js';
import type { StoredEvent } from './docket.js';

export type WorkReply<T = Record<string, unknown>> = ({ ok: true } & T) | { ok: false; error: ErrorBody };

/** Sends `body` to `docket.work.<queue>.<verb>` and returns the parsed reply (ok or not). */
export async function work<T = Record<string, unknown>>(
  nc: NatsConnection,
  queue: string,
  verb: WorkVerb,
  body: unknown,
  timeoutMs = 30_000,
): Promise<WorkReply<T>> {
  const msg = await nc.request(subjects.work(queue, verb), JSON.stringify(body), { timeout: timeoutMs });
  return msg.json<WorkReply<T>>();
}

/** The reply's fields, or a thrown Error naming the code when the reply was not ok. */
export function ok<T>(reply: WorkReply<T>): T {
  if (!reply.ok) throw new Error(`expected ok, got ${reply.error.code}: ${reply.error.message}`);
  return reply;
}

/**
 * Sends again while the reply is `unavailable` (DESIGN: retry), as a conforming client does;
 * every other reply, ok or not, is returned. `onUnavailable` sees each one that was resent.
 */
export async function resendOnUnavailable<T>(send: () => Promise<WorkReply<T>>, onUnavailable?: (error: ErrorBody) => void, attempts = 10): Promise<WorkReply<T>> {
  for (let i = 1; ; i++) {
    const reply = await send();
    if (reply.ok || reply.error.code !== 'unavailable' || i >= attempts) return reply;
    onUnavailable?.(reply.error);
    await new Promise((r) => setTimeout(r, 20 * i));
  }
}

export interface ClaimBody {
  readonly worker?: string;
  readonly max?: number;
  readonly wait_ms?: number;
  readonly lease_ms?: number;
  readonly max_priority?: number;
  readonly request_id?: string;
}

/** A claim that must succeed; returns its jobs. `wait_ms` defaults to 0 (answer now). */
export async function claim(nc: NatsConnection, queue: string, body: ClaimBody = {}): Promise<ClaimedJob[]> {
  const full = { worker: 'test-worker', wait_ms: 0, ...body };
  const reply = await work<{ jobs: ClaimedJob[] }>(nc, queue, 'claim', full, (full.wait_ms ?? 0) + 15_000);
  return ok(reply).jobs;
}

export async function complete(nc: NatsConnection, queue: string, job: { job_id: string; run_id: string }, result: unknown = null): Promise<WorkReply<{ job_id: string; status: string }>> {
  return work(nc, queue, 'complete', { job_id: job.job_id, run_id: job.run_id, result });
}

export async function fail(
  nc: NatsConnection,
  queue: string,
  job: { job_id: string; run_id: string },
  error: { message: string; retryable?: boolean } = { message: 'boom' },
): Promise<WorkReply<{ job_id: string; status: string }>> {
  return work(nc, queue, 'fail', { job_id: job.job_id, run_id: job.run_id, error });
}

export async function heartbeat(nc: NatsConnection, queue: string, runIds: readonly string[]): Promise<string[]> {
  return ok(await work<{ lost: string[] }>(nc, queue, 'heartbeat', { worker: 'test-worker', run_ids: runIds })).lost;
}

// ---------------------------------------------------------------------------------------------
// Waiting on a node's store. JobStore has onChange but no way to remove a listener, so one
// listener per store is registered here and shared by every wait on it.

interface StoreWaiter {
  readonly check: () => boolean;
  readonly resolve: () => void;
}
const watches = new WeakMap<JobStore, Set<StoreWaiter>>();

function waitersOf(store: JobStore): Set<StoreWaiter> {
  let set = watches.get(store);
  if (!set) {
    const created = new Set<StoreWaiter>();
    store.onChange(() => {
      for (const waiter of [...created]) {
        if (waiter.check()) {
          created.delete(waiter);
          waiter.resolve();
        }
      }
    });
    watches.set(store, created);
    set = created;
  }
  return set;
}

/** Resolves once `predicate` holds on `node`'s store (checked now and after every change). */
export function until(node: DocketNode, predicate: (store: JobStore) => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  if (predicate(node.store)) return Promise.resolve();
  const set = waitersOf(node.store);
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      set.delete(waiter);
      reject(new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`));
    }, timeoutMs);
    const waiter: StoreWaiter = {
      check: () => predicate(node.store),
      resolve: () => {
        clearTimeout(timer);
        resolve();
      },
    };
    set.add(waiter);
  });
}

/**
 * Resolves once `check` holds, looking every 10 ms: for state that announces no change (a
 * Worker's counters, a node's leadership). Prefer `until` for anything in a node's store.
 */
export async function eventually(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Resolves with the job's record once `predicate` holds for it on `node`. */
export async function untilJob(node: DocketNode, jobId: string, predicate: (record: JobRecord) => boolean, what: string, timeoutMs?: number): Promise<JobRecord> {
  await until(node, (store) => {
    const record = store.get(jobId);
    return record !== undefined && predicate(record);
  }, `${what} (job ${jobId})`, timeoutMs);
  return node.store.get(jobId)!;
}

/**
 * Resolves with the retry of `failedJobId` (the job whose retry_of names it) once `node` has it.
 * For keyed jobs the retry's id is not retryJobId(failed, attempt): look it up by its link.
 */
export async function untilRetryOf(node: DocketNode, failedJobId: string, timeoutMs?: number): Promise<JobRecord> {
  const find = () => [...node.store.values()].find((r) => r.state.job.context.retry_of === failedJobId);
  await until(node, () => find() !== undefined, `the retry of ${failedJobId}`, timeoutMs);
  return find()!;
}

export function statusOf(node: DocketNode, jobId: string): string | undefined {
  return node.store.get(jobId)?.state.job.value;
}

/** Job ids of `queue` on `node` with their status, sorted by id. */
export function statuses(node: DocketNode, queue: string): Record<string, string> {
  const out: Record<string, string> = {};
  const records = [...node.store.values()].filter((r) => r.queue === queue).sort((a, b) => (a.jobId < b.jobId ? -1 : 1));
  for (const r of records) out[r.jobId] = r.state.job.value;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Fences and events.

let fenceSerial = 0;

/**
 * Makes every append `node` had already started visible before this returns. The node publishes
 * all its appends on one connection, in order, and JetStream stores one connection's publishes in
 * order: a sentinel submitted through the node's own submit handler lands after them. Used to
 * show that something did NOT happen (no retry, no lapse) without sleeping.
 */
export async function fence(node: DocketNode, fenceQueue = 'fence'): Promise<void> {
  const handler = (node.commands as unknown as { handlers: Map<string, (body: unknown, msg: never) => Promise<Record<string, unknown>>> }).handlers.get('submit');
  if (!handler) throw new Error('node has no submit handler (CommandService internals changed?)');
  const reply = (await handler({ queue: fenceQueue, params: { fence: ++fenceSerial } }, undefined as never)) as { job_id: string };
  const record = node.store.get(reply.job_id);
  if (!record) throw new Error('fence job missing from its own node');
  await node.tail.waitFor(commitSeqOf(record.seq));
  // Leave no queued job behind in the fence queue's order: cancel it through the same door.
  const cancel = (node.commands as unknown as { handlers: Map<string, (body: unknown, msg: never) => Promise<unknown>> }).handlers.get('cancel')!;
  await cancel({ job_id: reply.job_id }, undefined as never);
}

/**
 * The first event of `queue` at or after stream sequence `fromSeq` that `predicate` accepts,
 * read with the SDK's `events()` (so starting before the action that appends it is race-free).
 */
export async function nextEvent(
  client: Client,
  queue: string,
  fromSeq: number,
  predicate: (e: RecordedEvent) => boolean,
  what: string,
  timeoutMs = 10_000,
): Promise<RecordedEvent> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    for await (const e of client.events({ queue, from: Math.max(1, fromSeq), signal: controller.signal })) {
      if (predicate(e)) return e;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for event: ${what}`);
}

/**
 * Checks the log of one queue for two open runs of one job: between a `job.claimed` and the
 * event that closes that run (succeeded, failed, cancelled, skipped), no other `job.claimed` on
 * the same subject. Returns the violations (empty when the log is clean).
 */
export function doubleOpenRuns(events: readonly StoredEvent[]): string[] {
  const open = new Map<string, string>();
  const violations: string[] = [];
  for (const e of events) {
    if (e.type === 'job.claimed') {
      const runId = String(e.data['run_id']);
      const already = open.get(e.subject);
      if (already !== undefined) violations.push(`seq ${e.seq}: ${e.subject} claimed by run ${runId} while run ${already} is open`);
      open.set(e.subject, runId);
    } else if (e.type === 'job.succeeded' || e.type === 'job.failed' || e.type === 'job.cancelled' || e.type === 'job.skipped') {
      open.delete(e.subject);
    }
  }
  return violations;
}

/** The most jobs of one queue running at once, read from its log (claimed opens, a close ends). */
export function maxOpenRuns(events: readonly StoredEvent[]): number {
  const open = new Set<string>();
  let max = 0;
  for (const e of events) {
    if (e.type === 'job.claimed') open.add(e.subject);
    else if (e.type === 'job.succeeded' || e.type === 'job.failed' || e.type === 'job.cancelled' || e.type === 'job.skipped') open.delete(e.subject);
    max = Math.max(max, open.size);
  }
  return max;
}

// ---------------------------------------------------------------------------------------------
// Leadership and dispatcher internals, read-only.

/**
 * Makes some node lead `queue` now: a work request makes the node it lands on take the free
 * lease (DESIGN: leadership by KV CAS) and run its recovery (adopt leases, create retries).
 * Returns the node that leads.
 */
export async function leadNow(nc: NatsConnection, queue: string, nodes: readonly DocketNode[]): Promise<DocketNode> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const reply = await work<{ lost: string[] }>(nc, queue, 'heartbeat', { run_ids: [] });
    const leader = nodes.find((n) => n.leadership.isLeader(queue));
    if (reply.ok && leader) return leader;
    if (Date.now() > deadline) throw new Error(`no node leads ${queue} (last reply ${JSON.stringify(reply)})`);
    // The lease is held by a node that is gone and has not expired yet: ask again shortly.
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** How many claims are parked in the queue's dispatcher (reads a private field). */
export function parkedClaims(node: DocketNode, queue: string): number {
  const dispatcher = node.dispatcher(queue) as unknown as { waiters?: unknown[] } | undefined;
  return dispatcher?.waiters?.length ?? 0;
}

/** Resolves once a claim is parked in `node`'s dispatcher for `queue` (polls a private field). */
export async function untilParked(node: DocketNode, queue: string, count = 1, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (parkedClaims(node, queue) < count) {
    if (Date.now() > deadline) throw new Error(`no claim parked on ${queue} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The time a promise took to settle, with its value. */
export async function timed<T>(p: Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await p;
  return { value, ms: performance.now() - started };
}
