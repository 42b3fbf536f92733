/**
 * Fan-in/fan-out (issue 15, Performance): 1,000 parents each waiting on 9 children, 10,000 jobs
 * in all, end to end with one no-op worker at concurrency 100: docket submits the children in
 * batches, then the parents with `depends_on` (released by the queue's leader once their children
 * succeeded); BullMQ adds the same shape with its FlowProducer (a parent with 9 children per
 * flow), in chunks of flows. Done when every parent has completed.
 *
 * Both systems first run WARMUP_SHARE of the workload through the same queue and worker,
 * unmeasured: 10,000 jobs last about a second, and a Node process's first thousands of jobs run
 * before its JIT has compiled the hot path (docket's node paid ~35% more CPU per job without it,
 * README "Performance"), which says nothing about a server that has been up for a minute.
 */
import { FlowProducer, Worker as BullWorker } from 'bullmq';
import * as bull from '../lib/bullmq.js';
import { measured, type Group, type Measurement } from '../lib/harness.js';
import { connectClient, connectLocalClient, workerClass } from '../lib/docket.js';
import { redisOf, withDocket, type BenchEnv } from '../lib/env.js';
import type { RedisServer } from '../lib/procs.js';
import { jobParams } from '../lib/workload.js';

export const FAN_CHILDREN = 9;
const CONCURRENCY = 100;
/** The unmeasured warm-up, as a share of the parents (same shape, same queue and worker). */
const WARMUP_SHARE = 0.3;

/** Counts handled jobs; `reach(n)` resolves once n have been handled in all. */
export function counter(): { tick(): void; reach(n: number): Promise<void> } {
  let count = 0;
  let goal = Number.POSITIVE_INFINITY;
  let done: () => void = () => {};
  return {
    tick() {
      if (++count === goal) done();
    },
    reach(n) {
      if (count >= n) return Promise.resolve();
      goal = n;
      return new Promise<void>((resolve) => (done = resolve));
    },
  };
}

/** What submitDocketFlows needs of a client (docket's Client, or the bench's dynamically loaded one). */
interface FlowSubmitter {
  submitBatch(jobs: readonly { queue: string; params: Record<string, unknown>; depends_on?: string[] }[]): Promise<{ jobs: readonly { ok: boolean; job_id?: string; error?: unknown }[] }>;
}

/**
 * Submits parents [from, to) of `queue` with their FAN_CHILDREN children each, `perChunk` parents
 * at a time: the children first, then their parents naming them in `depends_on` (or not, for
 * the same jobs without dependencies). A refused item is an error.
 */
export async function submitDocketFlows(client: FlowSubmitter, queue: string, from: number, to: number, perChunk: number, withDependencies: boolean): Promise<void> {
  for (let p0 = from; p0 < to; p0 += perChunk) {
    const count = Math.min(perChunk, to - p0);
    const children = Array.from({ length: count * FAN_CHILDREN }, (_, i) => ({ queue, params: jobParams(p0 * FAN_CHILDREN + i) }));
    const made = await client.submitBatch(children);
    const ids = made.jobs.map((j) => {
      if (!j.ok || j.job_id === undefined) throw new Error(`a child was refused: ${JSON.stringify(j.error)}`);
      return j.job_id;
    });
    const parentsOf = Array.from({ length: count }, (_, k) => ({ queue, params: jobParams(1_000_000 + p0 + k), ...(withDependencies ? { depends_on: ids.slice(k * FAN_CHILDREN, (k + 1) * FAN_CHILDREN) } : {}) }));
    const refused = (await client.submitBatch(parentsOf)).jobs.filter((j) => !j.ok);
    if (refused.length > 0) throw new Error(`${refused.length} parents refused: ${JSON.stringify(refused[0]?.error)}`);
  }
}

/** `embedded`: the node in this process and the worker embedded in it (README "Embedded workers"). */
async function docketFanIn(env: BenchEnv, parents: number, chunk: number, embedded = false): Promise<Measurement> {
  const Worker = await workerClass();
  const queue = 'fan';
  return withDocket(env, async (run) => {
    const client = embedded ? await connectLocalClient(run.node.local) : await connectClient(run.url);
    const total = parents * (FAN_CHILDREN + 1);
    const warmParents = Math.round(parents * WARMUP_SHARE);
    const handled = counter();
    const place = embedded ? { local: run.node.local } : { servers: run.url };
    const worker = new Worker({ ...place, queue, concurrency: CONCURRENCY, handler: async () => {
      handled.tick();
      return null;
    } });
    await worker.start();
    const perChunk = Math.max(1, Math.floor(chunk / (FAN_CHILDREN + 1)));
    const submitFlows = (from: number, to: number): Promise<void> => submitDocketFlows(client, queue, from, to, perChunk, true);
    try {
      const warmJobs = warmParents * (FAN_CHILDREN + 1);
      await submitFlows(-warmParents, 0);
      await handled.reach(warmJobs);
      const m = await measured(run.roles(), async () => {
        await submitFlows(0, parents);
        await handled.reach(warmJobs + total);
      });
      return { values: { rate: total / m.seconds }, cpu: m.cpu, extra: { parents, children: FAN_CHILDREN, jobs: total, warmup_jobs: warmJobs, concurrency: CONCURRENCY, node: run.node.mode, ...(embedded ? { embedded } : {}) } };
    } finally {
      // Before the node stops: a worker closed after it waits out its unanswered completions.
      await worker.close();
      await client.close();
    }
  }, embedded ? 'inproc' : env.nodeMode);
}

async function bullFanIn(redis: RedisServer, parents: number, chunk: number): Promise<Measurement> {
  await bull.flush(redis);
  const connection = bull.connection(redis);
  const producer = new FlowProducer({ connection });
  const total = parents * (FAN_CHILDREN + 1);
  const warmParents = Math.round(parents * WARMUP_SHARE);
  const completed = counter();
  const worker = new BullWorker('bench-fan', async () => null, { connection, concurrency: CONCURRENCY });
  worker.on('completed', () => completed.tick());
  await worker.waitUntilReady();
  const perChunk = Math.max(1, Math.floor(chunk / (FAN_CHILDREN + 1)));
  const addFlows = async (from: number, to: number): Promise<void> => {
    for (let p0 = from; p0 < to; p0 += perChunk) {
      const count = Math.min(perChunk, to - p0);
      await producer.addBulk(
        Array.from({ length: count }, (_, k) => ({
          name: 'parent',
          queueName: 'bench-fan',
          data: jobParams(1_000_000 + p0 + k),
          children: Array.from({ length: FAN_CHILDREN }, (_, c) => ({ name: 'child', queueName: 'bench-fan', data: jobParams((p0 + k) * FAN_CHILDREN + c) })),
        })),
      );
    }
  };
  try {
    const warmJobs = warmParents * (FAN_CHILDREN + 1);
    await addFlows(-warmParents, 0);
    await completed.reach(warmJobs);
    const m = await measured({ bench: process.pid, redis: redis.pid }, async () => {
      await addFlows(0, parents);
      await completed.reach(warmJobs + total);
    });
    return { values: { rate: total / m.seconds }, cpu: m.cpu, extra: { parents, children: FAN_CHILDREN, jobs: total, warmup_jobs: warmJobs, concurrency: CONCURRENCY } };
  } finally {
    await worker.close();
    await producer.close();
  }
}

export function fanInGroup(env: BenchEnv): Group {
  const parents = env.config.quick ? 100 : 1_000;
  const { chunk } = env.config;
  const total = parents * (FAN_CHILDREN + 1);
  return {
    name: 'fan_in',
    systems: {
      docket: () => docketFanIn(env, parents, chunk),
      docket_embedded: () => docketFanIn(env, parents, chunk, true),
      bullmq_aof: () => bullFanIn(redisOf(env, 'aof'), parents, chunk),
    },
    rows: [
      {
        scenario: 'fan_in.c100',
        title: `fan-in/fan-out, ${parents.toLocaleString('en-US')} parents each waiting on ${FAN_CHILDREN} children (${total.toLocaleString('en-US')} jobs), worker concurrency ${CONCURRENCY}`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket.rate',
        peer: 'bullmq_aof.rate',
        peerLabel: 'BullMQ FlowProducer, Redis AOF everysec',
        target: { on: 'ratio', op: '>=', limit: 1.5, text: '≥ 1.5× BullMQ' },
        note: 'docket: children in batches, then their parents with depends_on; BullMQ: FlowProducer.addBulk of flows (a parent with its children); both after an unmeasured warm-up of 30% of the flows through the same queue and worker',
      },
      {
        scenario: 'fan_in.c100.embedded',
        title: `fan-in/fan-out, ${parents.toLocaleString('en-US')} parents each waiting on ${FAN_CHILDREN} children (${total.toLocaleString('en-US')} jobs), worker concurrency ${CONCURRENCY}; docket's worker and client embedded in the node's process`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket_embedded.rate',
        peer: 'bullmq_aof.rate',
        peerLabel: 'BullMQ FlowProducer, Redis AOF everysec',
        target: { on: 'ratio', op: '>=', limit: 1.5, text: '≥ 1.5× BullMQ' },
        note: 'the same flows with the worker and the client in the leader\'s process (README "Embedded workers"), as BullMQ\'s worker and FlowProducer reach Redis directly; the row above is the worker and the client in a process of their own',
      },
    ],
  };
}
