/**
 * Issue 5, items 5-7, on one large queue per system (1,000,000 jobs in the full run):
 *   claim throughput with a small queue (1,000) and then with the large one;
 *   resident bytes per queued job (the node's RSS for docket, redis-server's for BullMQ);
 *   restart: process start to `serving` with the whole history in the log (docket), against
 *   redis-server loading its AOF (BullMQ), and docket's start with an empty log as the baseline.
 * Filling 1M jobs is the expensive part, so this group runs once and samples 3 times inside.
 */
import { Queue } from 'bullmq';
import { startNatsServer, type TestNatsServer } from '../../test/support/nats-server.js';
import * as bull from '../lib/bullmq.js';
import { median, measured, sleep, type Group, type Measurement } from '../lib/harness.js';
import { connectClient, startDocketNode, tempDir, workerClass, type ClientApi, type DocketNodeHandle, type WorkerApi, type WorkerOptions } from '../lib/docket.js';
import { rssBytesOf, startRedis } from '../lib/procs.js';
import type { BenchEnv } from '../lib/env.js';
import { docketJobs } from '../lib/workload.js';

const SAMPLES = 3;
const CLAIM_CONCURRENCY = 100;
const CLAIM_TIMEOUT_MS = 90_000;
/** How long a restart with the large history may take before it counts as failed. */
const RESTART_TIMEOUT_MS = 180_000;
/**
 * The claim long poll of the bench's measuring workers. Claims answer at once while jobs are
 * queued, so this changes no rate; it only stops close() waiting 2 s on an empty queue.
 */
const SHORT_CLAIM_WAIT_MS = 250;
/** A claim or restart sample slower than this is not repeated. */
const SLOW_SAMPLE_S = 60;

/** Waits until `pid`'s RSS changes by less than 1% over three readings 500 ms apart (at most 15 s). */
async function settledRss(pid: number): Promise<number> {
  const readings: number[] = [];
  for (let i = 0; i < 30; i++) {
    readings.push(rssBytesOf(pid) ?? NaN);
    const last = readings.slice(-3);
    if (last.length === 3 && (Math.max(...last) - Math.min(...last)) / Math.max(...last) < 0.01) break;
    await sleep(500);
  }
  return readings.at(-1)!;
}

export interface FillProgress {
  /** Jobs submitted before the budget ran out (all of them when it did not). */
  submitted: number;
  /** Why the fill stopped early (a submit that timed out as the node slowed down), if it did. */
  error?: string;
  /** Jobs/s over each tenth of the fill: a falling curve shows the node slowing as the queue grows. */
  readonly curve: { readonly upTo: number; readonly rate: number }[];
}

/**
 * Submits `n` jobs in chunks. With a budget, stops after the chunk that crosses it, so a node
 * that slows down as its queue grows ends the run in bounded time with the size it reached.
 */
async function submitChunks(client: ClientApi, queue: string, n: number, chunk: number, budgetMs = Infinity, label?: string): Promise<FillProgress> {
  const progress: FillProgress = { submitted: 0, curve: [] };
  const step = Math.max(chunk, Math.floor(n / 10));
  const t0 = performance.now();
  let markAt = t0;
  let markCount = 0;
  for (let offset = 0; offset < n; offset += chunk) {
    const size = Math.min(chunk, n - offset);
    const chunkStarted = performance.now();
    let jobs: Awaited<ReturnType<ClientApi['submitBatch']>>['jobs'];
    try {
      ({ jobs } = await client.submitBatch(docketJobs(queue, size, offset)));
    } catch (err: unknown) {
      if (budgetMs === Infinity) throw err;
      // A budgeted fill measures at the size the node reached; part of this chunk may be queued too.
      progress.error = `submitBatch after ${offset.toLocaleString('en-US')} jobs: ${err instanceof Error ? err.message : String(err)}`;
      const elapsed = performance.now() - markAt;
      progress.curve.push({ upTo: offset, rate: Math.round(((offset - markCount) / elapsed) * 1000) });
      if (label) process.stderr.write(`  ${label}: stopped, ${progress.error}\n`);
      break;
    }
    const refused = jobs.filter((j) => !j.ok).length;
    if (refused > 0) throw new Error(`${refused} submits refused after ${offset} submitted: ${JSON.stringify(jobs.find((j) => !j.ok)?.error)}`);
    progress.submitted = offset + size;
    const now = performance.now();
    const chunkMs = now - chunkStarted;
    if (chunkMs > 5_000) {
      progress.curve.push({ upTo: progress.submitted, rate: Math.round((size / chunkMs) * 1000) });
      if (label) process.stderr.write(`  ${label}: the chunk up to ${progress.submitted.toLocaleString('en-US')} took ${(chunkMs / 1000).toFixed(1)} s\n`);
    }
    if (progress.submitted - markCount >= step || progress.submitted === n) {
      const rate = ((progress.submitted - markCount) / (now - markAt)) * 1000;
      progress.curve.push({ upTo: progress.submitted, rate: Math.round(rate) });
      if (label) process.stderr.write(`  ${label}: ${progress.submitted.toLocaleString('en-US')} submitted, ${Math.round(rate).toLocaleString('en-US')} jobs/s over the last ${(progress.submitted - markCount).toLocaleString('en-US')}\n`);
      markAt = now;
      markCount = progress.submitted;
    }
    if (now - t0 > budgetMs && progress.submitted < n) {
      if (label) process.stderr.write(`  ${label}: fill budget of ${budgetMs / 1000} s spent at ${progress.submitted.toLocaleString('en-US')} jobs; measuring at that size\n`);
      break;
    }
  }
  return progress;
}

/** A docket worker (concurrency 100) on a queue already holding jobs: rate from its 1st to its `k`-th job. */
async function docketClaimRate(Worker: new (o: WorkerOptions) => WorkerApi, url: string, queue: string, k: number): Promise<number> {
  let handled = 0;
  let first = 0;
  let done!: (ms: number) => void;
  const finished = new Promise<number>((resolve) => (done = resolve));
  const worker = new Worker({
    servers: url,
    queue,
    concurrency: CLAIM_CONCURRENCY,
    claimWaitMs: SHORT_CLAIM_WAIT_MS,
    handler: async () => {
      if (handled === 0) first = performance.now();
      if (++handled === k) done(performance.now() - first);
      return null;
    },
  });
  await worker.start();
  try {
    const ms = await Promise.race([finished, sleep(CLAIM_TIMEOUT_MS).then(() => Promise.reject(new Error(`worker handled ${handled} of ${k} in ${CLAIM_TIMEOUT_MS / 1000} s`)))]);
    return ((k - 1) / ms) * 1000;
  } finally {
    await worker.close();
  }
}

export function largeGroup(env: BenchEnv): Group {
  const { largeQueue: large, smallQueue: small, claimJobs: k } = env.config;
  const fillChunk = 10_000;
  const fillBudgetS = env.config.fillBudgetMs / 1000;
  return {
    name: 'large_queue',
    reps: 1,
    systems: {
      async docket(): Promise<Measurement> {
        const Worker = await workerClass();
        const nats: TestNatsServer = await startNatsServer();
        const data = tempDir('docket-bench-large-');
        let node: DocketNodeHandle | undefined;
        let client: ClientApi | undefined;
        const samples: Record<string, number[]> = { start_empty_ms: [], claim_small: [], claim_large: [], restart_ms: [], first_claim_ms: [] };
        const values: Record<string, number> = {};
        const extra: Record<string, unknown> = { large_queue: large, small_queue: small, claimed_per_sample: k, claim_concurrency: CLAIM_CONCURRENCY };
        let fillCpu: Measurement['cpu'];
        // A failing stage (a node that runs out of memory at 1M jobs, say) is recorded and ends
        // the run; the figures of the stages before it are kept.
        // `independent` stages (restarts need only the log) run after a failed one, unless the
        // node never started.
        const stage = async (name: string, fn: () => Promise<void>, independent = false): Promise<boolean> => {
          if (extra['failed_stage'] !== undefined && !(independent && node)) return false;
          try {
            await fn();
            return true;
          } catch (err: unknown) {
            const message = err instanceof Error ? err.message.slice(0, 2000) : String(err);
            if (extra['failed_stage'] === undefined) {
              extra['failed_stage'] = name;
              extra['error'] = message;
            } else {
              extra[`error_${name}`] = message;
            }
            process.stderr.write(`  large_queue docket: ${name} failed: ${message.split('\n')[0]}\n`);
            return false;
          }
        };
        try {
          await stage('start with an empty log', async () => {
            for (let i = 0; i < SAMPLES; i++) {
              await node?.close();
              node = await startDocketNode(nats.url, data.path, env.nodeMode);
              samples['start_empty_ms']!.push(node.startMs);
            }
            extra['node'] = node!.mode;
            client = await connectClient(nats.url);
          });
          await stage('claims from a small queue', async () => {
            for (let i = 0; i < SAMPLES; i++) {
              await submitChunks(client!, `small_${i}`, small, fillChunk);
              samples['claim_small']!.push(await docketClaimRate(Worker, nats.url, `small_${i}`, k));
            }
          });
          await stage(`filling ${large} jobs`, async () => {
            const rssBefore = await settledRss(node!.pid);
            const roles = { bench: process.pid, node: node!.pid, nats: nats.process.pid! };
            const fill = await measured(roles, () => submitChunks(client!, 'large', large, fillChunk, env.config.fillBudgetMs, 'large_queue docket fill'));
            const queued = fill.result.submitted;
            fillCpu = fill.cpu;
            values['fill_rate'] = queued / fill.seconds;
            values['queued'] = queued;
            extra['fill'] = {
              jobs: queued,
              target_jobs: large,
              budget_s: env.config.fillBudgetMs / 1000,
              chunk: fillChunk,
              seconds: fill.seconds,
              cpu: fill.cpu,
              curve: fill.result.curve,
              ...(fill.result.error ? { stopped_by: fill.result.error } : {}),
            };
            const rssAfter = await settledRss(node!.pid);
            extra['rss_bytes'] = { before_fill: rssBefore, after_fill: rssAfter };
            values['rss_per_job'] = (rssAfter - rssBefore) / queued;
          });
          await stage('claims from the large queue', async () => {
            for (let i = 0; i < SAMPLES; i++) {
              const rate = await docketClaimRate(Worker, nats.url, 'large', k);
              samples['claim_large']!.push(rate);
              if (k / rate > SLOW_SAMPLE_S) break; // one slow sample says enough; keep the run bounded
            }
          });
          await stage('counting the log', async () => {
            await client?.close();
            client = undefined;
            const info = await fetch(`http://127.0.0.1:${nats.monitorPort}/jsz`).then((r) => r.json() as Promise<{ messages?: number }>).catch(() => ({ messages: undefined }));
            extra['events_in_log'] = info.messages;
          }, true);
          await stage('restarts with the history', async () => {
            for (let i = 0; i < SAMPLES; i++) {
              await node!.close();
              const t0 = performance.now();
              node = await startDocketNode(nats.url, data.path, env.nodeMode, RESTART_TIMEOUT_MS);
              samples['restart_ms']!.push(node.startMs);
              const slowRestart = node.startMs > SLOW_SAMPLE_S * 1000;
              extra[`restart_${i + 1}_log`] = node.startLog.filter((l) => /folded|checkpoint|serving/.test(l)).slice(0, 4);
              // A worker started at "serving" shows when claims are really served, not just logged.
              let firstClaim = NaN;
              let got!: () => void;
              const claimed = new Promise<void>((resolve) => (got = resolve));
              const worker = new Worker({
                servers: nats.url,
                queue: 'large',
                concurrency: 1,
                claimWaitMs: SHORT_CLAIM_WAIT_MS,
                handler: async () => {
                  if (Number.isNaN(firstClaim)) {
                    firstClaim = performance.now() - t0;
                    got();
                  }
                  return null;
                },
              });
              await worker.start();
              await Promise.race([claimed, sleep(30_000)]);
              await worker.close();
              if (Number.isNaN(firstClaim)) extra[`restart_${i + 1}_first_claim`] = 'no job claimed within 30 s of serving';
              else samples['first_claim_ms']!.push(firstClaim);
              if (slowRestart) break; // one slow sample says enough; keep the run bounded
            }
          }, true);
          for (const [name, xs] of Object.entries(samples)) if (xs.length > 0) values[name] = median(xs);
          // Issue 11's measure: the restart beyond the bare process start-up of the same run.
          if (values['restart_ms'] !== undefined && values['start_empty_ms'] !== undefined) values['restart_beyond_empty_ms'] = values['restart_ms'] - values['start_empty_ms'];
          return { values, samples, ...(fillCpu ? { cpu: fillCpu } : {}), extra };
        } finally {
          await client?.close().catch(() => undefined);
          await node?.close().catch(() => undefined);
          await nats.stop();
          data.remove();
        }
      },
      async bullmq(): Promise<Measurement> {
        let redis = await startRedis('aof');
        const samples: Record<string, number[]> = { claim_small: [], claim_large: [], restart_ms: [] };
        const extra: Record<string, unknown> = { large_queue: large, small_queue: small, claimed_per_sample: k, claim_concurrency: CLAIM_CONCURRENCY, redis: 'appendonly everysec' };
        try {
          const conn = bull.connection(redis);
          for (let i = 0; i < SAMPLES; i++) {
            const q = new Queue(`small_${i}`, { connection: conn });
            await bull.addBulk(q, small, fillChunk);
            await q.close();
            samples['claim_small']!.push(await bull.claimRate(redis, `small_${i}`, k));
          }
          const before = await bull.redisUsedMemory(redis);
          const queue = new Queue('large', { connection: conn });
          const fill = await measured({ bench: process.pid, redis: redis.pid }, () => bull.addBulk(queue, large, fillChunk));
          await queue.close();
          await sleep(1000);
          const after = await bull.redisUsedMemory(redis);
          extra['fill'] = { jobs: large, chunk: fillChunk, seconds: fill.seconds, cpu: fill.cpu };
          extra['memory_bytes'] = { before_fill: before, after_fill: after, used_memory_per_job: (after.used - before.used) / large };
          for (let i = 0; i < SAMPLES; i++) samples['claim_large']!.push(await bull.claimRate(redis, 'large', k));
          for (let i = 0; i < SAMPLES; i++) {
            const { dir, port } = redis;
            await redis.stop({ keepDir: true });
            redis = await startRedis('aof', { dir, port });
            samples['restart_ms']!.push(redis.startMs);
          }
          return {
            values: {
              queued: large,
              fill_rate: large / fill.seconds,
              rss_per_job: (after.rss - before.rss) / large,
              claim_small: median(samples['claim_small']!),
              claim_large: median(samples['claim_large']!),
              restart_ms: median(samples['restart_ms']!),
            },
            samples,
            cpu: fill.cpu,
            extra,
          };
        } finally {
          await redis.stop();
        }
      },
    },
    rows: [
      {
        scenario: 'large_queue.queued',
        title: `jobs queued for the large-queue rows (target ${large.toLocaleString('en-US')}; the fill stops after ${fillBudgetS} s)`,
        unit: 'jobs',
        better: 'higher',
        docket: 'docket.queued',
        peer: 'bullmq.queued',
        peerLabel: 'BullMQ, Redis AOF everysec',
      },
      {
        scenario: 'memory.per_queued_job',
        title: `resident bytes per queued job, up to ${large.toLocaleString('en-US')} queued`,
        unit: 'bytes',
        better: 'lower',
        docket: 'docket.rss_per_job',
        peer: 'bullmq.rss_per_job',
        peerLabel: 'BullMQ: redis-server RSS',
        target: { on: 'value', op: '<=', limit: 1024, text: '≤ 1 KiB' },
        note: "docket: the node process's RSS growth while the queue filled; BullMQ: redis-server's",
      },
      {
        scenario: 'claim.small_queue',
        title: `claim throughput, ${small.toLocaleString('en-US')} queued (worker concurrency ${CLAIM_CONCURRENCY})`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket.claim_small',
        peer: 'bullmq.claim_small',
        peerLabel: 'BullMQ, Redis AOF everysec',
      },
      {
        scenario: 'claim.large_queue',
        title: `claim throughput, up to ${large.toLocaleString('en-US')} queued (worker concurrency ${CLAIM_CONCURRENCY})`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket.claim_large',
        peer: 'bullmq.claim_large',
        peerLabel: 'BullMQ, Redis AOF everysec',
      },
      {
        scenario: 'claim.large_vs_small',
        title: `claim throughput at up to ${large.toLocaleString('en-US')} queued vs ${small.toLocaleString('en-US')} queued`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket.claim_large',
        peer: 'docket.claim_small',
        peerLabel: `docket at ${small.toLocaleString('en-US')} queued`,
        target: { on: 'ratio', op: '>=', limit: 0.8, text: '≥ 0.8× the small queue' },
      },
      {
        scenario: 'restart.serving',
        title: `restart to "serving", with the large queue's history (events_in_log in the JSON)`,
        unit: 'ms',
        better: 'lower',
        docket: 'docket.restart_ms',
        peer: 'bullmq.restart_ms',
        peerLabel: 'redis-server loading its AOF',
        target: { on: 'value', op: '<=', limit: 2000, text: '≤ 2 s' },
        note: 'from spawn (process start-up included; tsx too with BENCH_FROM_SRC=1) to the node logging serving',
      },
      {
        scenario: 'restart.beyond_start',
        title: 'restart to "serving" with the large history, beyond the start with an empty log (medians)',
        unit: 'ms',
        better: 'lower',
        docket: 'docket.restart_beyond_empty_ms',
        target: { on: 'value', op: '<=', limit: 1000, text: '≤ 1 s' },
        note: 'restart.serving minus restart.empty_log, both measured in this run',
      },
      {
        scenario: 'restart.first_claim',
        title: 'restart to the first job handled by a worker started at "serving"',
        unit: 'ms',
        better: 'lower',
        docket: 'docket.first_claim_ms',
        peer: 'docket.restart_ms',
        peerLabel: 'docket to "serving"',
      },
      {
        scenario: 'restart.empty_log',
        title: 'start with an empty log (process start-up baseline)',
        unit: 'ms',
        better: 'lower',
        docket: 'docket.start_empty_ms',
      },
      {
        scenario: 'bulk_submit.large',
        title: `filling the large queue in chunks of ${fillChunk.toLocaleString('en-US')} (fill_curve in the JSON)`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'docket.fill_rate',
        peer: 'bullmq.fill_rate',
        peerLabel: 'BullMQ addBulk, Redis AOF everysec',
        note: 'one run',
      },
    ],
  };
}
