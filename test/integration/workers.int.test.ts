/**
 * The TypeScript Worker end to end against a real nats-server (issue 3): concurrency, results,
 * thrown errors, NonRetryableJobError, the AbortSignal on cancel, progress, close() draining;
 * then two nodes on one stream: work requests forwarded from a follower to the leader, and a
 * follower taking the queue over when the leader closes or its connection dies.
 *
 * Real time here (the Worker heartbeats on timers): leases are long enough never to lapse by
 * accident, and every wait is on an event or the store, with a deadline.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { Msg, NatsConnection, Payload, PublishOptions, SubscriptionOptions } from '@nats-io/nats-core';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import { Worker as DocketWorker, type WorkerHandler, type WorkerOptions } from '../../src/client/worker.js';
import { NonRetryableJobError } from '../../src/errors.js';
import { retryJobId } from '../../src/ids.js';
import { subjects } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { auditMessages } from '../../src/audit/audit.js';
import { readLog } from '../../src/store/read-log.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { caughtUp, openResources, queueLog, startTrackedNode, uniqueQueue, closeTestFile, connectTestClients } from '../support/docket.js';
import { claim, complete, deferred, doubleOpenRuns, eventually, fence, heartbeat, leadNow, maxOpenRuns, until, untilJob, untilParked, work } from '../support/worker-helpers.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
let nodeSerial = 0;
const workers = new Set<DocketWorker>();

function startFileNode(options: { leadershipLeaseMs?: number; nc?: NatsConnection } = {}): Promise<DocketNode> {
  return startTrackedNode(server, { nodeName: `workers-${++nodeSerial}`, ...options });
}

beforeAll(async () => {
  server = await startNatsServer();
  node = await startFileNode();
  ({ client, nc, jsm } = await connectTestClients(server, 'workers-test'));
});

afterAll(async () => {
  for (const w of workers) await w.close();
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(async () => {
  // Leak check: every worker a test started drains and closes within 5 s (no handler left
  // hanging), and only the file's node is open.
  const hung: string[] = [];
  for (const w of workers) {
    const closed = await Promise.race([w.close().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5_000))]);
    if (!closed) hung.push(w.id);
  }
  workers.clear();
  expect(hung).toEqual([]);
  expect(openResources()).toHaveLength(1);
});

/** A started Worker on the file's server, tracked for the leak check. */
async function startWorker(queue: string, handler: WorkerHandler, options: Partial<WorkerOptions> = {}): Promise<DocketWorker> {
  const w = new DocketWorker({ servers: server.url, queue, handler, leaseMs: 30_000, claimWaitMs: 500, ...options });
  workers.add(w);
  await w.start();
  return w;
}

async function submitMany(queue: string, n: number, spec: Record<string, unknown> = {}): Promise<string[]> {
  const { jobs } = await client.submitBatch(Array.from({ length: n }, (_, i) => ({ queue, params: { n: i }, ...spec })));
  return jobs.map((j) => {
    if (!j.ok) throw new Error(`submit failed: ${j.error.message}`);
    return j.job_id;
  });
}

/**
 * `nc` for a Worker, except that the first `verb` reply carrying jobs is lost on the way: the
 * request fails (as one no responder answered does) after the leader committed the claim, and
 * the worker never hears of the jobs.
 */
function dropFirstReplyWithJobs(nc: NatsConnection, verb: 'claim' | 'complete'): { nc: NatsConnection; count(): number } {
  let dropped = 0;
  // The reply subjects of this verb's requests, as the Worker publishes them.
  const replyTo = new Set<string>();
  const lost = (subject: string) => ({ subject, data: new Uint8Array(0), headers: { code: 503 } }) as unknown as Msg;
  const proxy = new Proxy(nc, {
    get(target, prop, receiver) {
      if (prop === 'publish') {
        return (subject: string, payload?: Payload, opts?: PublishOptions) => {
          if (subject.endsWith(`.${verb}`) && opts?.reply) replyTo.add(opts.reply);
          target.publish(subject, payload, opts);
        };
      }
      if (prop === 'subscribe') {
        return (subject: string, opts?: SubscriptionOptions) => {
          const callback = opts?.callback;
          if (!callback) return target.subscribe(subject, opts);
          return target.subscribe(subject, {
            ...opts,
            callback: (err, msg) => {
              if (err === null && dropped === 0 && replyTo.has(msg.subject) && (msg.json<{ jobs?: unknown[] }>().jobs?.length ?? 0) > 0) {
                dropped += 1;
                return callback(null, lost(msg.subject));
              }
              return callback(err, msg);
            },
          });
        };
      }
      const value: unknown = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { nc: proxy, count: () => dropped };
}

function allEnded(ids: readonly string[], status = 'succeeded'): (store: DocketNode['store']) => boolean {
  return (store) => ids.every((id) => store.get(id)?.state.job.value === status);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/**
 * A stand-in for an older node, on a server of its own: it hands out one job (then answers claims
 * with none after 100 ms), takes completions, and refuses a request as that node's strict schema
 * did when `refuses` names a field of it. Records every claim and completion it was sent.
 */
async function oldNodeStandIn(queue: string, refuses: (verb: 'claim' | 'complete', body: Record<string, unknown>) => string | null) {
  const own = await startNatsServer();
  const standIn = await connect({ servers: own.url, name: 'old-node-stand-in' });
  const claims: Record<string, unknown>[] = [];
  const completions: Record<string, unknown>[] = [];
  let handedOut = false;
  const refusal = (field: string) => JSON.stringify({ ok: false, error: { code: 'invalid_request', message: `unknown field ${field}` } });
  standIn.subscribe(subjects.work(queue, 'claim'), {
    callback: (_err, msg) => {
      const body = msg.json<Record<string, unknown>>();
      claims.push(body);
      const field = refuses('claim', body);
      if (field !== null) return void msg.respond(refusal(field));
      const jobs = handedOut ? [] : [{ job_id: 'j1', run_id: 'r1', queue, key: null, params: {}, attempt: 1, max_attempts: 1, lease_ms: 30_000, fencing_token: 1 }];
      handedOut = true;
      if (jobs.length > 0) msg.respond(JSON.stringify({ ok: true, jobs }));
      else setTimeout(() => msg.respond(JSON.stringify({ ok: true, jobs })), 100);
    },
  });
  standIn.subscribe(subjects.work(queue, 'complete'), {
    callback: (_err, msg) => {
      const body = msg.json<Record<string, unknown>>();
      completions.push(body);
      const field = refuses('complete', body);
      msg.respond(field !== null ? refusal(field) : JSON.stringify({ ok: true, job_id: body['job_id'], status: 'succeeded', jobs: [] }));
    },
  });
  await standIn.flush();
  return {
    url: own.url,
    claims,
    completions,
    async close(): Promise<void> {
      await standIn.drain();
      await own.stop();
    },
  };
}

describe('Worker', () => {
  test('without prefetch, never holds more than `concurrency` runs; results are stored', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submitMany(queue, 9);
    const gate = deferred();
    const three = deferred();
    let active = 0;
    let maxActive = 0;
    const w = await startWorker(queue, async (job) => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      if (active === 3) three.resolve();
      await gate.promise;
      active -= 1;
      return { doubled: (job.params['n'] as number) * 2 };
    }, { concurrency: 3, prefetch: 0 });
    await three.promise;
    // Three runs are open and the worker asks for no more while its slots are full.
    await caughtUp(node, jsm);
    const running = ids.filter((id) => node.store.get(id)?.state.job.value === 'running');
    expect(running).toHaveLength(3);
    expect(w.inFlight).toBe(3);
    gate.resolve();
    await until(node, allEnded(ids), 'all nine succeeded');
    await eventually(() => w.inFlight === 0, 'the worker saw its last completion acknowledged');
    expect(maxActive).toBe(3);
    expect(w.counts).toEqual({ succeeded: 9, failed: 0, lost: 0 });
    const log = await queueLog(nc, queue);
    expect(maxOpenRuns(log)).toBe(3);
    expect(doubleOpenRuns(log)).toEqual([]);
    for (const [i, id] of ids.entries()) {
      expect((await client.get(id)).run).toMatchObject({ status: 'completed', result: { doubled: i * 2 }, worker: w.id, pid: process.pid });
    }
  });

  test('jobs arriving one at a time while claims are parked: still never more than `concurrency` handlers at once, nor more runs than `concurrency` + `prefetch`', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    let active = 0;
    let maxActive = 0;
    const w = await startWorker(queue, async (job) => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      // The handler's own work: a few milliseconds, varying by job.
      await new Promise((r) => setTimeout(r, (job.params['n'] as number) % 7));
      active -= 1;
    }, { concurrency: 4, prefetch: 2, claimWaitMs: 200 });
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push((await client.submit({ queue, params: { n: i } })).job_id);
    await until(node, allEnded(ids), 'all forty succeeded');
    await eventually(() => w.counts.succeeded === 40, 'the worker counted forty successes');
    expect(maxActive).toBeLessThanOrEqual(4);
    const log = await queueLog(nc, queue);
    expect(maxOpenRuns(log)).toBeLessThanOrEqual(6);
    expect(doubleOpenRuns(log)).toEqual([]);
  });

  test('short runs: the worker claims up to `prefetch` jobs ahead and runs them in claim order, at most `concurrency` handlers at once', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submitMany(queue, 30);
    let active = 0;
    let maxActive = 0;
    const order: string[] = [];
    const w = await startWorker(queue, async (job) => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      order.push(job.job_id);
      await new Promise((r) => setImmediate(r));
      active -= 1;
    }, { concurrency: 1, prefetch: 3 });
    await until(node, allEnded(ids), 'all thirty succeeded');
    await eventually(() => w.counts.succeeded === 30, 'the worker counted thirty successes');
    expect(maxActive).toBe(1);
    expect(order).toEqual(ids);
    const log = await queueLog(nc, queue);
    // One slot and three jobs claimed ahead: four runs open at once, never more.
    expect(maxOpenRuns(log)).toBe(4);
    expect(doubleOpenRuns(log)).toEqual([]);
  });

  test('long runs: the worker claims nothing ahead, whatever its prefetch', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submitMany(queue, 8);
    const w = await startWorker(queue, () => new Promise((r) => setTimeout(() => r(null), 25)), { concurrency: 2, prefetch: 2 });
    await until(node, allEnded(ids), 'all eight succeeded');
    await eventually(() => w.counts.succeeded === 8, 'the worker counted eight successes');
    expect(maxOpenRuns(await queueLog(nc, queue))).toBe(2);
  });

  test('a job held for a slot whose run is lost meanwhile (cancelled) is dropped, not run; close() runs the held jobs still ours', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    // The first job is short (its handler returns at once: its run is timed within one turn of
    // the event loop, far under 10 ms), so its completion claims ahead: the second job blocks the
    // one slot until told, while the two after it are held.
    const ids = await submitMany(queue, 4);
    const ran: string[] = [];
    const blocking = deferred<string>();
    const release = deferred();
    const w = await startWorker(queue, async (job, ctx) => {
      ran.push(job.job_id);
      if (ran.length === 2) {
        blocking.resolve(job.job_id);
        await release.promise;
        // Learns now, not at the next timed heartbeat, which runs were lost.
        await ctx.heartbeat();
      }
      return null;
    }, { concurrency: 1, prefetch: 2 });
    const running = await blocking.promise;
    const first = ran[0];
    const held = ids.filter((id) => id !== first && id !== running);
    await until(node, (s) => held.every((id) => s.get(id)?.state.job.value === 'running'), 'the other two claimed ahead');
    await client.cancel(held[0]!);
    const closing = w.close();
    release.resolve();
    await closing;
    expect(ran).toEqual([first, running, held[1]]);
    expect(w.counts).toEqual({ succeeded: 3, failed: 0, lost: 1 });
    expect(node.store.get(held[1]!)?.state.job.value).toBe('succeeded');
    expect(node.store.get(held[0]!)?.state.job.value).toBe('cancelled');
  });

  test('a thrown error fails the run with its message; NonRetryableJobError ends the chain; a retry then succeeds', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const noBackoff = { base_ms: 0, max_ms: 0, jitter: 0 };
    const [plain] = await submitMany(queue, 1, { params: { kind: 'plain' }, max_attempts: 1 });
    const [fatal] = await submitMany(queue, 1, { params: { kind: 'fatal' }, max_attempts: 5, backoff: noBackoff });
    const [flaky] = await submitMany(queue, 1, { params: { kind: 'flaky' }, max_attempts: 2, backoff: noBackoff });
    await startWorker(queue, (job) => {
      switch (job.params['kind']) {
        case 'plain':
          throw new Error('kaput');
        case 'fatal':
          throw new NonRetryableJobError('bad input');
        default:
          if (job.attempt === 1) throw new TypeError('flaky once');
          return { attempt: job.attempt };
      }
    }, { concurrency: 2 });
    const flakyRetry = retryJobId(flaky!, 1);
    await until(node, (s) => s.get(plain!)?.state.job.value === 'failed' && s.get(fatal!)?.state.job.value === 'failed' && s.get(flakyRetry)?.state.job.value === 'succeeded', 'plain and fatal failed, flaky retried and succeeded');

    const p = await client.get(plain!);
    expect(p.job).toMatchObject({ status: 'failed', end_reason: 'error' });
    expect(p.run).toMatchObject({ status: 'failed', failure_reason: 'error', error: { message: 'kaput', retryable: true, stack: expect.stringContaining('kaput') } });
    const f = await client.get(fatal!);
    expect(f.run).toMatchObject({ status: 'failed', error: { message: 'bad input', retryable: false } });
    await fence(node);
    expect(node.store.get(retryJobId(fatal!, 1))).toBeUndefined();
    expect(node.store.get(retryJobId(plain!, 1))).toBeUndefined();
    expect((await client.get(flaky!)).run).toMatchObject({ error: { message: 'flaky once' } });
    expect((await client.get(flakyRetry)).job).toMatchObject({ retry_of: flaky, attempt: 2, status: 'succeeded' });
    expect((await client.get(flakyRetry)).run).toMatchObject({ result: { attempt: 2 } });
  });

  test('cancelling a running job fires the handler\'s AbortSignal; its late completion is refused', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const [jobId] = await submitMany(queue, 1);
    const started = deferred<AbortSignal>();
    const aborted = deferred<unknown>();
    const w = await startWorker(queue, async (_job, ctx) => {
      started.resolve(ctx.signal);
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
      aborted.resolve(ctx.signal.reason);
      return 'finished anyway'; // a handler that ignores the abort: its completion must be refused
    }, { leaseMs: 1_500 }); // heartbeats every 500 ms
    await started.promise;
    const cancelledAt = performance.now();
    await client.cancel(jobId!);
    const reason = await aborted.promise;
    expect(performance.now() - cancelledAt).toBeLessThan(2_000);
    expect(String(reason)).toMatch(/no longer holds/);
    await eventually(() => w.inFlight === 0 && w.counts.lost === 1, 'the refused completion');
    expect(w.counts).toEqual({ succeeded: 0, failed: 0, lost: 1 });
    const detail = await client.get(jobId!);
    expect(detail.job.status).toBe('cancelled');
    expect(detail.run).toMatchObject({ status: 'failed', failure_reason: 'cancelled', result: null });
  });

  test('automatic heartbeats keep a run alive for longer than its lease (real clock)', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const [jobId] = await submitMany(queue, 1);
    const w = await startWorker(queue, async (_job, ctx) => {
      await new Promise((r) => setTimeout(r, 2_600)); // the handler's work: 2.6 leases long
      return { aborted: ctx.signal.aborted };
    }, { leaseMs: 1_000 });
    const done = await untilJob(node, jobId!, (r) => r.state.job.value !== 'running' && r.state.job.value !== 'queued', 'the run ended', 10_000);
    expect(done.state.job.value).toBe('succeeded');
    expect(done.state.run.context.result).toEqual({ aborted: false });
    await eventually(() => w.inFlight === 0, 'the worker saw the completion');
    expect(w.counts).toEqual({ succeeded: 1, failed: 0, lost: 0 });
  });

  test('a run whose lease lapsed has its AbortSignal fired on the next heartbeat; its completion is refused', async ({ task }) => {
    // A node of its own on a ManualClock: the lapse happens when the test moves the clock.
    const queue = uniqueQueue(task.name);
    const own = await startNatsServer();
    const manual = new ManualClock();
    const lone = await startTrackedNode(own, { clock: manual, nodeName: `manual-${++nodeSerial}` });
    const ownClient = await Client.connect({ servers: own.url });
    const started = deferred<string>();
    const aborted = deferred<unknown>();
    const w = new DocketWorker({
      servers: own.url,
      queue,
      leaseMs: 1_500, // heartbeats every 500 ms of real time
      claimWaitMs: 300,
      handler: async (_job, ctx) => {
        started.resolve(ctx.runId);
        await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        aborted.resolve(ctx.signal.reason);
        return 'too late';
      },
    });
    try {
      await w.start();
      const { job_id: jobId } = await ownClient.submit({ queue });
      const runId = await started.promise;
      manual.advance(1_500); // every heartbeat so far was at the same manual time: the lease lapses now
      const lapsed = await untilJob(lone, jobId, (r) => r.state.job.value === 'failed', 'the lapse');
      expect(lapsed.state.run.context).toMatchObject({ run_id: runId, failure_reason: 'lease_expired' });
      expect(String(await aborted.promise)).toMatch(/no longer holds/);
      await eventually(() => w.inFlight === 0 && w.counts.lost === 1, 'the refused completion');
      expect(w.counts).toEqual({ succeeded: 0, failed: 0, lost: 1 });
      expect((await ownClient.get(jobId)).run).toMatchObject({ status: 'failed', result: null });
    } finally {
      await w.close();
      await ownClient.close();
      await lone.close();
      await own.stop();
    }
  });

  test('progress() is sent with the next heartbeat, as its documentation says', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const beats: unknown[] = [];
    const sub = nc.subscribe(subjects.work(queue, 'heartbeat'), {
      callback: (_err, msg) => {
        beats.push(msg.json());
      },
    });
    await nc.flush();
    const reported = deferred();
    const gate = deferred();
    await submitMany(queue, 1);
    await startWorker(queue, async (_job, ctx) => {
      ctx.progress({ pct: 50 });
      reported.resolve();
      await gate.promise;
    }, { leaseMs: 1_500 });
    try {
      await reported.promise;
      // Heartbeats go every 500 ms on the worker's timer; wait for three.
      await eventually(() => beats.length >= 3, 'three heartbeats', 5_000);
      expect(beats.map((b) => JSON.stringify(b)).join('\n')).toContain('"pct":50');
    } finally {
      gate.resolve();
      sub.unsubscribe();
    }
  });

  test('a handler may destructure its context: heartbeat, progress and setExitCode work unbound', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const [jobId] = await submitMany(queue, 1);
    await startWorker(queue, async (_job, { runId, fencingToken, heartbeat, progress, setExitCode, signal }) => {
      progress({ pct: 10 });
      await heartbeat();
      setExitCode(5);
      return { runId, fencingToken, aborted: signal.aborted };
    });
    await until(node, (s) => s.get(jobId!)?.state.job.value === 'succeeded', 'the job succeeded');
    const { run } = await client.get(jobId!);
    expect(run).toMatchObject({ status: 'completed', exit_code: 5, result: { runId: run!.run_id, aborted: false } });
    expect((run!.result as { fencingToken: unknown }).fencingToken).toEqual(expect.any(Number));
  });

  test('close() stops claiming and drains: it resolves only after the in-flight run has finished', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const [jobId] = await submitMany(queue, 1);
    const started = deferred();
    const gate = deferred();
    const w = await startWorker(queue, async () => {
      started.resolve();
      await gate.promise;
      return 'drained';
    });
    await started.promise;
    let closed = false;
    const closing = w.close().then(() => {
      closed = true;
    });
    // While the run is in flight close() waits; a job submitted meanwhile is not started.
    await new Promise((r) => setTimeout(r, 700)); // longer than claimWaitMs: the claim loop has ended
    const [later] = await submitMany(queue, 1);
    expect(closed).toBe(false);
    gate.resolve();
    await closing;
    expect(w.inFlight).toBe(0);
    await caughtUp(node, jsm);
    expect((await client.get(jobId!)).run).toMatchObject({ status: 'completed', result: 'drained' });
    expect(node.store.get(later!)?.state.job.value).toBe('queued');
    await client.cancel(later!);
  });

  test('a Worker with options the protocol refuses fails at construction or start, instead of retrying refused claims forever', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const outcomes: Record<string, string> = {};
    const cases: Record<string, Partial<WorkerOptions>> = {
      'leaseMs below the minimum lease': { leaseMs: 500 },
      'concurrency 0': { concurrency: 0 },
      'prefetch -1': { prefetch: -1 },
      'prefetch 1.5': { prefetch: 1.5 },
      'prefetch above the most one claim may ask for': { prefetch: 1_001 },
      'claimWaitMs above the longest long poll': { claimWaitMs: 120_000 },
      'a queue name that is not one': { queue: 'not a queue' },
    };
    for (const [name, options] of Object.entries(cases)) {
      try {
        const w = new DocketWorker({ servers: server.url, queue, handler: () => null, ...options });
        workers.add(w);
        await w.start();
        outcomes[name] = 'started';
      } catch {
        outcomes[name] = 'refused';
      }
    }
    expect(outcomes).toEqual(Object.fromEntries(Object.keys(cases).map((k) => [k, 'refused'])));
  });

  test('each completion carries the next claim: jobs queued ahead take one round trip each, not two', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submitMany(queue, 40);
    // Every request on the queue's claim subject, as the node sees it (a plain subscription
    // receives them beside the nodes' queue group).
    let claims = 0;
    const sub = nc.subscribe(subjects.work(queue, 'claim'), { callback: () => void (claims += 1) });
    await nc.flush();
    const order: string[] = [];
    // Without prefetch: claims ahead would bring jobs by claims of their own.
    const w = await startWorker(queue, async (job) => {
      order.push(job.job_id);
      return null;
    }, { prefetch: 0 });
    await until(node, allEnded(ids), 'all forty succeeded');
    await eventually(() => w.counts.succeeded === 40, 'every completion acknowledged');
    sub.unsubscribe();
    // Concurrency 1: one claim found the first job, each completion brought the next; the last
    // brought none and the claim loop went back to its long poll.
    expect(order).toEqual(ids);
    expect(claims).toBeLessThanOrEqual(3);
    const log = await queueLog(nc, queue);
    expect(doubleOpenRuns(log)).toEqual([]);
    expect(log.filter((e) => e.type === 'job.claimed')).toHaveLength(40);
  });

  test.each([0, 1])('concurrency 1, each job submitted once the previous one is seen completed: every job is claimed in its submit\'s commit, by the completion\'s waiting next claim (prefetch %i)', async (prefetch) => {
    const queue = uniqueQueue(`latency-loop-prefetch-${prefetch}`);
    let claims = 0;
    const sub = nc.subscribe(subjects.work(queue, 'claim'), { callback: () => void (claims += 1) });
    await nc.flush();
    const abort = new AbortController();
    const live = client.live({ queue, types: ['job.succeeded'], signal: abort.signal });
    await live.ready;
    const completions = live[Symbol.asyncIterator]();
    // A long wait for the next job (the default is 20 ms), so that a slow turn of this loaded
    // test machine between a completion and the next submit cannot make the check flaky.
    await startWorker(queue, () => null, { claimWaitMs: 2_000, nextClaimWaitMs: 2_000, prefetch });
    await untilParked(node, queue, 1);
    const ids: string[] = [];
    try {
      for (let i = 0; i < 20; i++) {
        const { job_id } = await client.submit({ queue, params: { i } });
        ids.push(job_id);
        // The latency loop: the next submit goes once this job's completion is seen.
        for (;;) {
          const seen = await completions.next();
          if (seen.done || seen.value.aggregate.id === job_id) break;
        }
      }
    } finally {
      abort.abort();
      sub.unsubscribe();
    }
    const log = await queueLog(nc, queue);
    const commitOf = (jobId: string, type: string) => log.find((e) => e.jobId === jobId && e.type === type)?.seq;
    // The completion's next claim was parked before its live event went out, so the submit that
    // followed found it waiting: no job waited for a commit of its own claim.
    expect(ids.filter((id) => commitOf(id, 'job.claimed') !== commitOf(id, 'job.submitted'))).toEqual([]);
    // Only the first claim was the worker's own long poll; every later job came with a
    // completion's reply. Claiming ahead sends no more requests to a queue with nothing ready.
    expect(claims).toBe(1);
  });

  test('against a node older than next.wait_ms (refusing the field), a completion is sent again with a next claim that does not wait', async () => {
    const queue = 'old-node';
    const old = await oldNodeStandIn(queue, (verb, body) => (verb === 'complete' && isObject(body['next']) && 'wait_ms' in body['next'] ? 'next.wait_ms' : null));
    const { completions } = old;
    // Without prefetch, the one completion holds every run the worker has: its next claim waits.
    const w = new DocketWorker({ servers: old.url, queue, handler: () => null, claimWaitMs: 500, prefetch: 0 });
    try {
      await w.start();
      await eventually(() => w.counts.succeeded === 1, 'the completion taken');
      expect(w.counts.lost).toBe(0);
      expect(completions.map((c) => isObject(c['next']) && 'wait_ms' in c['next'])).toEqual([true, false]);
    } finally {
      await w.close();
      await old.close();
    }
  });

  test('a claim whose reply is lost after its job was claimed (the request failed): sent again with its request_id, the job runs at once, one run', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = (await client.submit({ queue })).job_id;
    const lossy = await connect({ servers: server.url, name: 'lossy-worker' });
    // The leader committed the claim and answered; the worker gave up waiting just before.
    const dropped = dropFirstReplyWithJobs(lossy, 'claim');
    const w = new DocketWorker({ nc: dropped.nc, queue, handler: () => 'ran', leaseMs: 30_000, claimWaitMs: 500 });
    try {
      workers.add(w);
      await w.start();
      // Well within the run's 30 s lease, which is how long the job would sit claimed otherwise.
      await untilJob(node, jobId, (r) => r.state.job.value === 'succeeded', 'the job ran', 5_000);
      expect(dropped.count()).toBe(1);
      await eventually(() => w.counts.succeeded === 1, 'the worker counted the success');
      expect(w.counts).toEqual({ succeeded: 1, failed: 0, lost: 0 });
      expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.claimed')).toHaveLength(1);
    } finally {
      // The worker first: it sends on this connection.
      await w.close();
      await lossy.close();
    }
  });

  test('a completion whose reply (with its next job) is lost: sent again with the same next claim, the next job runs at once, one run each', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submitMany(queue, 2);
    const lossy = await connect({ servers: server.url, name: 'lossy-worker' });
    const dropped = dropFirstReplyWithJobs(lossy, 'complete');
    // Without prefetch: the second job comes with the first one's completion, not a claim of its own.
    const w = new DocketWorker({ nc: dropped.nc, queue, handler: () => 'ran', leaseMs: 30_000, claimWaitMs: 500, prefetch: 0 });
    try {
      workers.add(w);
      await w.start();
      await until(node, allEnded(ids), 'both jobs ran', 5_000);
      expect(dropped.count()).toBe(1);
      await eventually(() => w.counts.succeeded === 2, 'the worker counted both');
      expect(w.counts.lost).toBe(0);
      const log = await queueLog(nc, queue);
      expect(log.filter((e) => e.type === 'job.claimed').map((e) => e.jobId)).toEqual(ids);
    } finally {
      // The worker first: it sends on this connection.
      await w.close();
      await lossy.close();
    }
  });

  test('against a node older than a claim\'s request_id (refusing the field), claims are sent without it', async () => {
    const queue = 'old-node-request-id';
    const old = await oldNodeStandIn(queue, (verb, body) => (verb === 'claim' && 'request_id' in body ? 'request_id' : null));
    const { claims, completions } = old;
    const w = new DocketWorker({ servers: old.url, queue, handler: () => null, claimWaitMs: 500 });
    try {
      await w.start();
      await eventually(() => w.counts.succeeded === 1, 'the completion taken');
      expect(claims.slice(0, 2).map((c) => 'request_id' in c)).toEqual([true, false]);
      expect(claims.slice(2).filter((c) => 'request_id' in c)).toEqual([]);
      expect(completions.map((c) => 'request_id' in ((c['next'] as object | undefined) ?? {}))).toEqual([false]);
    } finally {
      await w.close();
      await old.close();
    }
  });

  test('a Worker with more concurrency than one claim may ask for still gets jobs', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const w = await startWorker(queue, () => 'ran', { concurrency: 5_000 });
    const [jobId] = await submitMany(queue, 1);
    await untilJob(node, jobId!, (r) => r.state.job.value === 'succeeded', 'the job ran', 5_000);
    expect(w.counts.lost).toBe(0);
  });

  test('close() of an idle worker returns within claimWaitMs', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const w = await startWorker(queue, () => null, { claimWaitMs: 300 });
    const t = performance.now();
    await w.close();
    expect(performance.now() - t).toBeLessThan(1_500);
  });
});

describe('delays on the real clock', () => {
  test('a parked claim answers when a job submitted with delay_ms comes due, not at the next poll', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await leadNow(nc, queue, [node]);
    const parked = claim(nc, queue, { wait_ms: 10_000, lease_ms: 60_000 });
    await untilParked(node, queue);
    const submittedAt = performance.now();
    const { job_id: jobId } = await client.submit({ queue, delay_ms: 300 });
    const [job] = await parked;
    const ms = performance.now() - submittedAt;
    expect(job!.job_id).toBe(jobId);
    expect(ms).toBeGreaterThanOrEqual(290);
    // The dispatcher arms a timer for the earliest run_at; its poll fallback is 1 s.
    expect(ms).toBeLessThan(700);
    await complete(nc, queue, job!);
  });
});

describe('two nodes on one stream', () => {
  /** A server of the test's own (so no third node can take the queue), a client and a raw connection. */
  async function ownServer(): Promise<{ server: TestNatsServer; client: Client; nc: NatsConnection; jsm: JetStreamManager; nodes: DocketNode[]; start(options?: { leadershipLeaseMs?: number; nc?: NatsConnection }): Promise<DocketNode>; close(): Promise<void> }> {
    const own = await startNatsServer();
    const ownClient = await Client.connect({ servers: own.url });
    const ownNc = await connect({ servers: own.url, name: 'two-nodes-test' });
    const nodes: DocketNode[] = [];
    return {
      server: own,
      client: ownClient,
      nc: ownNc,
      jsm: await jetstreamManager(ownNc),
      nodes,
      async start(options = {}) {
        const started = await startTrackedNode(own, { nodeName: `pair-${++nodeSerial}`, ...options });
        nodes.push(started);
        return started;
      },
      async close() {
        for (const w of workers) await w.close();
        for (const n of nodes) await n.close().catch(() => undefined);
        await ownClient.close();
        await ownNc.drain();
        await own.stop();
      },
    };
  }

  test('work requests landing on the follower are forwarded to the leader and served', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const env = await ownServer();
    try {
      await env.start();
      await env.start();
      const leader = await leadNow(env.nc, queue, env.nodes);
      const follower = env.nodes.find((n) => n !== leader)!;
      expect(follower.leadership.isLeader(queue)).toBe(false);
      // Watch the leader's private inbox: a request there came through the follower.
      let forwarded = 0;
      const sub = env.nc.subscribe(subjects.leaderInbox(leader.name), { callback: () => void (forwarded += 1) });
      await env.nc.flush();
      const { jobs } = await env.client.submitBatch(Array.from({ length: 12 }, (_, i) => ({ queue, params: { n: i } })));
      const ids = jobs.map((j) => (j.ok ? j.job_id : ''));
      await caughtUp(leader, env.jsm);
      try {
        const claimed: string[] = [];
        for (let i = 0; i < 12; i++) {
          const [job] = await claim(env.nc, queue, { lease_ms: 60_000 });
          claimed.push(job!.job_id);
          expect(await heartbeat(env.nc, queue, [job!.run_id])).toEqual([]);
          expect(await complete(env.nc, queue, job!, i)).toMatchObject({ ok: true, status: 'succeeded' });
        }
        expect(claimed).toEqual(ids);
      } finally {
        sub.unsubscribe();
      }
      // 36 requests in a queue group of two: some went through the follower (p of none = 2^-36).
      expect(forwarded).toBeGreaterThan(0);
      expect(doubleOpenRuns(await queueLog(env.nc, queue))).toEqual([]);
    } finally {
      await env.close();
    }
  });

  test('when the leader closes, the other node takes the queue over and serves the worker', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const env = await ownServer();
    try {
      await env.start({ leadershipLeaseMs: 1_000 });
      await env.start({ leadershipLeaseMs: 1_000 });
      const leader = await leadNow(env.nc, queue, env.nodes);
      const other = env.nodes.find((n) => n !== leader)!;
      const w = new DocketWorker({ servers: env.server.url, queue, handler: (job) => ({ n: job.params['n'] as number }), concurrency: 2, leaseMs: 3_000, claimWaitMs: 300 });
      workers.add(w);
      await w.start();
      const submit = async () => (await env.client.submitBatch(Array.from({ length: 5 }, (_, i) => ({ queue, params: { n: i } })))).jobs.map((j) => (j.ok ? j.job_id : ''));
      const firstBatch = await submit();
      await until(other, allEnded(firstBatch), 'first batch done');

      const closedAt = performance.now();
      await leader.close();
      const secondBatch = await submit();
      await until(other, allEnded(secondBatch), 'second batch done on the other node');
      expect(performance.now() - closedAt).toBeLessThan(5_000);
      expect(other.leadership.isLeader(queue)).toBe(true);
      await eventually(() => w.counts.succeeded === 10, 'the worker counted ten successes');
      expect(doubleOpenRuns(await queueLog(env.nc, queue))).toEqual([]);
    } finally {
      await env.close();
    }
  });

  test('a work request reaching the follower right after the leader closed is served, not refused', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const env = await ownServer();
    try {
      await env.start({ leadershipLeaseMs: 3_000 });
      await env.start({ leadershipLeaseMs: 3_000 });
      const leader = await leadNow(env.nc, queue, env.nodes);
      const other = env.nodes.find((n) => n !== leader)!;
      // Let the follower learn who leads (it caches the leader when it forwards).
      for (let i = 0; i < 10; i++) expect((await work(env.nc, queue, 'heartbeat', { run_ids: [] })).ok).toBe(true);
      await leader.close(); // releases the lease: expires_at 0
      // Only the follower is left; the leader it cached is gone and gave up the lease.
      const reply = await work(env.nc, queue, 'heartbeat', { run_ids: [] });
      expect(reply).toEqual({ ok: true, lost: [] });
      expect(other.leadership.isLeader(queue)).toBe(true);
    } finally {
      await env.close();
    }
  });

  test('when the leader\'s connection dies, the other node takes over after the lease and the in-flight run completes', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const env = await ownServer();
    const doomedNc = await connect({ servers: env.server.url, name: 'doomed-node' });
    let releaseGate = () => {};
    try {
      // The doomed node starts alone, so it takes the queue.
      const doomed = await env.start({ leadershipLeaseMs: 1_000, nc: doomedNc });
      expect(await leadNow(env.nc, queue, [doomed])).toBe(doomed);
      const survivor = await env.start({ leadershipLeaseMs: 1_000 });
      const started = deferred<string>();
      const gate = deferred();
      releaseGate = () => gate.resolve();
      const w = new DocketWorker({
        servers: env.server.url,
        queue,
        concurrency: 2,
        leaseMs: 1_500,
        claimWaitMs: 300,
        handler: async (job) => {
          if (job.params['n'] === 0) {
            started.resolve(job.run_id);
            await gate.promise;
          }
          return 'ok';
        },
      });
      workers.add(w);
      await w.start();
      const [held] = (await env.client.submitBatch([{ queue, params: { n: 0 } }])).jobs.map((j) => (j.ok ? j.job_id : ''));
      const runId = await started.promise;

      const crashedAt = performance.now();
      await doomedNc.close(); // a crash: no lease given up, nothing drained
      await eventually(() => survivor.leadership.isLeader(queue), 'the survivor leads');
      expect(performance.now() - crashedAt).toBeLessThan(5_000);
      // The survivor adopts the running job once it has folded the partition (before it serves
      // any heartbeat); the worker's heartbeats keep it alive.
      await eventually(() => survivor.leases.size === 1, 'the survivor adopted the running job');
      releaseGate();
      await untilJob(survivor, held!, (r) => r.state.job.value === 'succeeded', 'the in-flight run completed through the survivor');
      expect(survivor.store.get(held!)?.state.run.context.run_id).toBe(runId);
      const more = (await env.client.submitBatch(Array.from({ length: 4 }, () => ({ queue, params: { n: 9 } })))).jobs.map((j) => (j.ok ? j.job_id : ''));
      await until(survivor, allEnded(more), 'new jobs served by the survivor');
      expect(w.counts.lost).toBe(0);
      expect(doubleOpenRuns(await queueLog(env.nc, queue))).toEqual([]);
      // The crashed node's close() must not throw although its connection is gone.
      const closing = doomed.close();
      await expect(closing).resolves.toBeUndefined();
    } finally {
      releaseGate();
      await env.close();
    }
    // env.close() closes the worker, which waits for the claim that was parked on the dead
    // leader: up to that claim's timeout (claimWaitMs + 10 s), past the 5 s default of a bare
    // `npx vitest run <file>` (test/vitest.config.ts, which `npm test` uses, allows 60 s).
  }, 30_000);
});

describe('the whole log', () => {
  test('everything this file appended passes docket audit (runs this file\'s tests first)', async () => {
    const messages = [];
    for await (const m of readLog(nc)) messages.push(m);
    const audit = auditMessages(messages);
    expect(audit.jobEvents).toBeGreaterThan(100);
    expect(audit.violations).toEqual([]);
  });
});
