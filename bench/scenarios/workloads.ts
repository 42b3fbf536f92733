/**
 * docket beside BullMQ on the same workloads (issue 5, items 1-3):
 *   bulk submit of `jobs` jobs in chunks of 1,000 (docket submitBatch, BullMQ addBulk);
 *   end to end: a no-op worker running first, then `jobs` submitted in chunks, until all completed;
 *   latency: submit -> completed, one job after another, p50 and p99.
 * BullMQ runs on Redis with AOF everysec (durability parity) and in memory (a second row).
 * docket gets a fresh nats-server and node per run; BullMQ a flushed Redis.
 */
import * as bull from '../lib/bullmq.js';
import { latencyFigures, measured, NotAvailableError, type Group, type Measurement, type RowDef } from '../lib/harness.js';
import { acknowledged, connectClient, connectLocalClient, workerClass, type ClientApi } from '../lib/docket.js';
import { redisOf, withDocket, type BenchEnv, type DocketRun } from '../lib/env.js';
import { jobEvent, subjectOf } from '../lib/events.js';
import { leanAppendCeiling } from '../lib/jetstream.js';
import { latencyFloor } from '../lib/latency-floor.js';
import { jobParams, submitInChunks } from '../lib/workload.js';


interface RowBase {
  readonly scenario: string;
  readonly metric: string;
  readonly title: string;
  readonly unit: string;
  readonly better: 'higher' | 'lower';
  readonly note?: string;
}

/** The row against BullMQ on AOF (with the target) and the same row against BullMQ in memory. */
function peerRows(base: RowBase, target?: RowDef['target']): RowDef[] {
  const { metric, scenario, ...rest } = base;
  return [
    { ...rest, scenario, docket: `docket.${metric}`, peer: `bullmq_aof.${metric}`, peerLabel: 'BullMQ, Redis AOF everysec', ...(target ? { target } : {}) },
    { ...rest, scenario: `${scenario}.redis_memory`, docket: `docket.${metric}`, peer: `bullmq_memory.${metric}`, peerLabel: 'BullMQ, Redis in memory' },
  ];
}

export function bulkSubmitGroup(env: BenchEnv): Group {
  const { jobs: n, chunk } = env.config;
  const docketBulk = (embedded: boolean): Promise<Measurement> =>
    withDocket(env, async (run) => {
      const client = await clientOf(run, embedded);
      try {
        const m = await measured(run.roles(), () => submitInChunks(client, 'bulk', n, chunk));
        return { values: { rate: n / m.seconds }, cpu: m.cpu, extra: { jobs: n, chunk, node: run.node.mode, ...(embedded ? { embedded } : {}) } };
      } finally {
        await client.close();
      }
    }, embedded ? 'inproc' : env.nodeMode);
  const rows = peerRows(
    { scenario: 'bulk_submit', metric: 'rate', title: `bulk submit, ${n.toLocaleString('en-US')} jobs in chunks of ${chunk.toLocaleString('en-US')}`, unit: 'jobs/s', better: 'higher' },
    { on: 'ratio', op: '>=', limit: 2.5, text: '≥ 2.5× BullMQ' },
  );
  return {
    name: 'bulk_submit',
    systems: {
      docket: () => docketBulk(false),
      docket_embedded: () => docketBulk(true),
      bullmq_aof: () => bull.bulkSubmit(redisOf(env, 'aof'), n, chunk),
      bullmq_memory: () => bull.bulkSubmit(redisOf(env, 'memory'), n, chunk),
      // The same appends with no docket code: what the target asks of docket, set against what
      // the substrate alone can do in the same run.
      lean_append: () =>
        leanAppendCeiling(n, chunk, (i) => {
          const event = jobEvent(i, 0, 'bulk');
          return { subject: subjectOf(i, 'bulk'), event: { ...event, data: { ...event.data, params: jobParams(i) } } };
        }),
    },
    rows: [
      ...rows,
      embeddedRow(rows[0]!, 'rate'),
      {
        scenario: 'bulk_submit.ceiling',
        title: `bulk submit's ceiling: the same ${n.toLocaleString('en-US')} appends on the lean path alone (${chunk.toLocaleString('en-US')} in flight, no docket node)`,
        unit: 'appends/s',
        better: 'higher',
        docket: 'lean_append.rate',
        peer: 'bullmq_aof.rate',
        peerLabel: 'BullMQ, Redis AOF everysec',
        note: "log v1's ceiling, one stored message per job on the leanest publish path; log v2 stores a commit of many jobs per message, so docket can pass it",
      },
      {
        scenario: 'bulk_submit.of_ceiling',
        title: 'bulk submit against its ceiling (docket ÷ the lean append path, same run)',
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket.rate',
        peer: 'lean_append.rate',
        peerLabel: 'lean append path alone',
      },
    ],
  };
}

export interface EndToEndOptions {
  readonly queue: string;
  readonly jobs: number;
  /** The worker's concurrency. */
  readonly concurrency: number;
  readonly chunk: number;
  /** Spread the jobs over this many concurrency_keys (flow control); none by default. */
  readonly keys?: number;
  /** Runs once the node serves, before the worker starts and outside the measured time (queue settings). */
  readonly prepare?: (client: ClientApi) => Promise<void>;
  /** The node in this process and the worker embedded in it (README "Embedded workers"). */
  readonly embedded?: boolean;
}

/** A client of the run's node: in process when embedded (its commands answered by the node in this process). */
export function clientOf(run: DocketRun, embedded: boolean | undefined): Promise<ClientApi> {
  return embedded && run.node.local !== undefined ? connectLocalClient(run.node.local) : connectClient(run.url);
}

/** The worker's connection: the node itself when embedded (the node runs in this process then), else the run's server. */
function workerPlace(run: DocketRun, embedded: boolean | undefined): { servers: string } | { local: unknown } {
  if (!embedded) return { servers: run.url };
  if (run.node.local === undefined) throw new NotAvailableError('embedded workers need the node in process');
  return { local: run.node.local };
}

/**
 * docket end to end: a no-op worker running first, then the jobs submitted in chunks, until the
 * node has acknowledged every completion. A fresh nats-server and node per run.
 */
export async function docketEndToEnd(env: BenchEnv, { queue, jobs: n, concurrency, chunk, keys, prepare, embedded }: EndToEndOptions): Promise<Measurement> {
  const Worker = await workerClass();
  return withDocket(env, async (run) => {
    const client = await clientOf(run, embedded);
    if (prepare) await prepare(client);
    let handled = 0;
    let done!: () => void;
    const allHandled = new Promise<void>((resolve) => (done = resolve));
    const worker = new Worker({
      ...workerPlace(run, embedded),
      queue,
      concurrency,
      handler: async () => {
        if (++handled === n) done();
        return null;
      },
    });
    await worker.start();
    let closeMs = 0;
    try {
      const m = await measured(run.roles(), async () => {
        await submitInChunks(client, queue, n, chunk, keys);
        await allHandled;
        if (worker.counts) {
          // Done when the node has acknowledged every completion, as BullMQ's 'completed'
          // event fires after its moveToFinished script returned.
          await acknowledged(worker, n);
        } else {
          // No counts: close() drains, so it resolves after the last completion is acknowledged
          // (and after the claim long-poll in flight ends: a bias against docket).
          const t0 = performance.now();
          await worker.close();
          closeMs = performance.now() - t0;
        }
      });
      return { values: { rate: n / m.seconds }, cpu: m.cpu, extra: { jobs: n, concurrency, chunk, ...(keys === undefined ? {} : { keys }), worker_close_ms: Math.round(closeMs), node: run.node.mode, ...(embedded ? { embedded } : {}) } };
    } finally {
      // Its claim long poll ends when the node stops, instead of after claimWaitMs. An embedded
      // worker is closed first: it talks to the node in this process.
      if (embedded) await worker.close();
      else run.defer(worker.close());
      await client.close();
    }
  }, embedded ? 'inproc' : env.nodeMode);
}

/** The same row for docket's embedded worker, against BullMQ on AOF, with the same target. */
function embeddedRow(row: RowDef, metric: string): RowDef {
  return {
    ...row,
    scenario: `${row.scenario}.embedded`,
    title: `${row.title}; docket's worker and client embedded in the node's process`,
    docket: `docket_embedded.${metric}`,
    note: 'the worker and the client run in the leader\'s process (README "Embedded workers"): their commands, claims and completions reach the node without NATS, as BullMQ\'s worker and queue reach Redis directly, while every commit is still stored and acknowledged by JetStream; the row above is the worker and the client in a process of their own',
  };
}

export function endToEndGroup(env: BenchEnv, concurrency: number): Group {
  const n = concurrency === 1 ? env.config.jobsAtConcurrency1 : env.config.jobs;
  const { chunk } = env.config;
  const rows = peerRows(
      {
        scenario: `end_to_end.c${concurrency}`,
        metric: 'rate',
        title: `end to end, ${n.toLocaleString('en-US')} no-op jobs, worker concurrency ${concurrency}`,
        unit: 'jobs/s',
        better: 'higher',
        ...(concurrency === 1 ? { note: 'a fifth of the jobs at concurrency 1, to keep the full run near 20 minutes' } : {}),
      },
      concurrency === 100
        ? { on: 'ratio', op: '>=', limit: 1.5, text: '≥ 1.5× BullMQ (AOF)' }
        : concurrency === 10
          ? { on: 'ratio', op: '>=', limit: 1, text: '≥ 1× BullMQ (AOF)' }
          : { on: 'ratio', op: '>=', limit: 0.4, text: '≥ 0.4× BullMQ (AOF)' },
  );
  return {
    name: `end_to_end_c${concurrency}`,
    systems: {
      docket: () => docketEndToEnd(env, { queue: 'e2e', jobs: n, concurrency, chunk }),
      docket_embedded: () => docketEndToEnd(env, { queue: 'e2e', jobs: n, concurrency, chunk, embedded: true }),
      bullmq_aof: () => bull.endToEnd(redisOf(env, 'aof'), n, concurrency, chunk),
      bullmq_memory: () => bull.endToEnd(redisOf(env, 'memory'), n, concurrency, chunk),
    },
    rows: [...rows, embeddedRow(rows[0]!, 'rate')],
  };
}

export function latencyGroup(env: BenchEnv): Group {
  const n = env.config.latencyJobs;
  const warmup = env.config.latencyWarmup;
  const p50 = peerRows(
    { scenario: 'latency.p50', metric: 'p50', title: `submit → completed, ${n.toLocaleString('en-US')} jobs in sequence, p50`, unit: 'ms', better: 'lower' },
    { on: 'ratio', op: '<=', limit: 1.5, text: '≤ 1.5× BullMQ (AOF)' },
  );
  const p99 = peerRows(
    { scenario: 'latency.p99', metric: 'p99', title: `submit → completed, ${n.toLocaleString('en-US')} jobs in sequence, p99`, unit: 'ms', better: 'lower' },
    { on: 'ratio', op: '<=', limit: 1, text: '≤ BullMQ (AOF)' },
  );
  return {
    name: 'latency',
    systems: {
      docket: () => docketLatency(false),
      docket_embedded: () => docketLatency(true),
      bullmq_aof: () => bull.latency(redisOf(env, 'aof'), n, warmup),
      bullmq_memory: () => bull.latency(redisOf(env, 'memory'), n, warmup),
      floor: () => latencyFloor(n, warmup, { path: 'hops' }),
      floor_leader_process: () => latencyFloor(n, warmup, { path: 'leader_process' }),
      floor_embedded: () => latencyFloor(n, warmup, { path: 'embedded' }),
    },
    rows: [...p50, embeddedRow(p50[0]!, 'p50'), ...p99, embeddedRow(p99[0]!, 'p99'), ...floorRows()],
  };

  /**
   * The contract's path played on bare NATS (bench/lib/latency-floor.ts) beside BullMQ, and docket
   * beside it: whether a target is out of reach of any design that keeps the contract on this
   * nats-server, and what docket's own work adds.
   */
  function floorRows(): RowDef[] {
    const bullmq = { peerLabel: 'BullMQ, Redis AOF everysec', unit: 'ms', better: 'lower' as const };
    const path = 'no docket code: 2 JetStream appends in sequence';
    const hops = `${path} and 4 one-way hops through nats-server`;
    const note = 'bench/lib/latency-floor.ts: three nats.js connections in the bench process on a fresh nats-server; a job is handed over only after its claim\'s commit is acknowledged and a completion is seen only after its commit is, so no design that keeps the contract has fewer appends in sequence';
    const leaderNote = 'bench/lib/latency-floor.ts: as latency.floor, with the leader\'s connection in a process of its own (bench/floor-leader.ts), as a docket node is to a worker and a client not embedded in it';
    return (['p50', 'p99'] as const).flatMap((metric): RowDef[] => [
      { ...bullmq, scenario: `latency.floor.${metric}`, title: `the contract's submit → completed on bare NATS (${hops}), ${metric}`, docket: `floor.${metric}`, peer: `bullmq_aof.${metric}`, note },
      { ...bullmq, scenario: `latency.floor.${metric}.leader_process`, title: `the contract's submit → completed on bare NATS (${hops}), the leader in a process of its own, ${metric}`, docket: `floor_leader_process.${metric}`, peer: `bullmq_aof.${metric}`, note: leaderNote },
      { ...bullmq, scenario: `latency.floor.${metric}.embedded`, title: `the contract's submit → completed on bare NATS for an embedded worker and client (${path}), ${metric}`, docket: `floor_embedded.${metric}`, peer: `bullmq_aof.${metric}`, note },
      { scenario: `latency.${metric}.of_floor`, title: `submit → completed, ${metric}, against its floor on bare NATS`, unit: 'ms', better: 'lower', docket: `docket.${metric}`, peer: `floor.${metric}`, peerLabel: 'the same path on bare NATS' },
      { scenario: `latency.${metric}.of_floor.leader_process`, title: `submit → completed, ${metric}, against its floor on bare NATS with the leader in a process of its own`, unit: 'ms', better: 'lower', docket: `docket.${metric}`, peer: `floor_leader_process.${metric}`, peerLabel: 'the same path on bare NATS, leader in its own process' },
      { scenario: `latency.${metric}.of_floor.embedded`, title: `submit → completed, ${metric}, embedded worker and client, against its floor on bare NATS`, unit: 'ms', better: 'lower', docket: `docket_embedded.${metric}`, peer: `floor_embedded.${metric}`, peerLabel: 'the same path on bare NATS' },
    ]);
  }

  async function docketLatency(embedded: boolean): Promise<Measurement> {
    const Worker = await workerClass();
    return withDocket(env, async (run): Promise<Measurement> => {
      const client = await clientOf(run, embedded);
      const watcher = await clientOf(run, embedded);
      const worker = new Worker({ ...workerPlace(run, embedded), queue: 'latency', concurrency: 1, handler: async () => null });
      await worker.start();
      const abort = new AbortController();
      const waiting = new Map<string, () => void>();
      const early = new Set<string>();
      // One live subscription for the whole loop (docket.live.q.latency, core NATS: the
      // leader publishes each commit once it is acknowledged), in place before
      // the first submit. BullMQ's waitUntilFinished also listens to events its server pushes.
      const events = watcher.live({ queue: 'latency', types: ['job.succeeded', 'job.failed'], signal: abort.signal });
      await events.ready;
      const iterator = events[Symbol.asyncIterator]();
      const pump = (async () => {
        for (;;) {
          const next = await iterator.next();
          if (next.done) return;
          const id = next.value.aggregate.id;
          const resolve = waiting.get(id);
          if (resolve) resolve();
          else early.add(id);
        }
      })();
      try {
        const samples: number[] = [];
        const m = await measured(run.roles(), async () => {
          for (let i = 0; i < n + warmup; i++) {
            const t0 = performance.now();
            const { job_id } = await client.submit({ queue: 'latency', params: { i } });
            if (!early.delete(job_id)) {
              await Promise.race([
                new Promise<void>((resolve) => waiting.set(job_id, resolve)),
                pump.then(() => { throw new Error('events() ended'); }),
                new Promise((_, reject) => setTimeout(() => reject(new Error(`job ${job_id} not completed in 30 s`)), 30_000).unref()),
              ]);
              waiting.delete(job_id);
            }
            samples.push(performance.now() - t0);
          }
        });
        const { values, extra } = latencyFigures(samples, warmup, n);
        return { values, cpu: m.cpu, extra: { ...extra, node: run.node.mode, ...(embedded ? { embedded } : {}) } };
      } finally {
        abort.abort();
        await pump.catch(() => undefined);
        if (embedded) await worker.close();
        else run.defer(worker.close());
        await watcher.close();
        await client.close();
      }
    }, embedded ? 'inproc' : env.nodeMode);
  }
}

export { NotAvailableError };
