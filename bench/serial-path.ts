/**
 * What one job costs each process, docket beside BullMQ (Redis AOF) in one run: CPU (user and
 * kernel), socket writes and reads per job, from /proc/<pid>/stat and /proc/<pid>/io. At
 * concurrency 1 a job's path is serial, so the count of writes on it (each one a syscall that
 * wakes another process) is what the VM charges most for (README "Performance").
 *
 *   [SYSTEMS=docket,docket_embedded,bullmq] npx tsx bench/serial-path.ts [jobs=3000] [concurrency=1]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { Queue, Worker as BullWorker } from 'bullmq';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startNatsServer, type TestNatsServer } from '../test/support/nats-server.js';
import { connection, addBulk } from './lib/bullmq.js';
import { acknowledged, connectClient, connectLocalClient, startDocketNode, tempDir, workerClass, type ClientApi, type WorkerApi } from './lib/docket.js';
import { startRedis } from './lib/procs.js';
import { submitInChunks } from './lib/workload.js';

const n = Number(process.argv[2] ?? 3_000);
const concurrency = Number(process.argv[3] ?? 1);
const CHUNK = 1_000;

interface Counters {
  readonly userS: number;
  readonly systemS: number;
  readonly writes: number;
  readonly reads: number;
  /** Minor page faults: first touches of memory (~11 µs each on the AMD VM of 2026-11-27). */
  readonly faults: number;
}

/** A process's CPU (user, kernel) and its read and write syscalls so far. */
function countersOf(pid: number | 'self'): Counters {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const io = Object.fromEntries(
    readFileSync(`/proc/${pid}/io`, 'utf8')
      .trim()
      .split('\n')
      .map((line) => line.split(': ')),
  ) as Record<string, string>;
  return { userS: Number(fields[11]) / 100, systemS: Number(fields[12]) / 100, writes: Number(io['syscw']), reads: Number(io['syscr']), faults: Number(fields[7]) };
}

/** Per job between two readings: µs of user and kernel CPU, writes and reads. */
function perJob(before: Counters, after: Counters): Record<string, number> {
  const us = (s: number) => Math.round((s * 1e6) / n);
  const per = (k: number) => +(k / n).toFixed(2);
  return { user_us: us(after.userS - before.userS), sys_us: us(after.systemS - before.systemS), writes: per(after.writes - before.writes), reads: per(after.reads - before.reads), faults: per(after.faults - before.faults) };
}

/** Commits stored in DOCKET so far (one stored message per commit). */
async function commitsIn(url: string): Promise<number> {
  const nc = await connect({ servers: url });
  try {
    return (await (await jetstreamManager(nc)).streams.info('DOCKET')).state.messages;
  } finally {
    await nc.close();
  }
}

/**
 * BENCH_HEAP_SAMPLE=<file>: V8's sampling heap profile of this process over the measured part,
 * counting the objects major GCs collected too (what reached the old space and died there, which
 * page faults pay for), written as a .heapprofile for DevTools. With BENCH_HEAP_SAMPLE_MINOR=1 it
 * counts what minor GCs collected as well: everything allocated, which sets how often they run.
 */
async function sampleHeap(work: () => Promise<void>): Promise<void> {
  const file = process.env['BENCH_HEAP_SAMPLE'];
  if (file === undefined) return work();
  const session = new Session();
  session.connect();
  const post = (method: string, params: object = {}): Promise<unknown> => new Promise((resolve, reject) => session.post(method, params, (err, result) => (err ? reject(err) : resolve(result))));
  await post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: process.env['BENCH_HEAP_SAMPLE_MINOR'] === '1' });
  await work();
  const { profile } = (await post('HeapProfiler.stopSampling')) as { profile: unknown };
  writeFileSync(file, JSON.stringify(profile));
  session.disconnect();
}

/** Runs `work` and reports each named process's cost per job, and the rate. */
async function measure(pids: Record<string, number | 'self'>, work: () => Promise<void>): Promise<Record<string, unknown>> {
  const before = Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, countersOf(pid)]));
  const t0 = performance.now();
  await sampleHeap(work);
  const seconds = (performance.now() - t0) / 1000;
  const after = Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, countersOf(pid)]));
  return { rate: Math.round(n / seconds), ...Object.fromEntries(Object.keys(pids).map((role) => [role, perJob(before[role]!, after[role]!)])) };
}

/** A docket node serving on `server`, and the client and worker of a run against it. */
interface DocketSide {
  readonly pids: Record<string, number | 'self'>;
  readonly client: ClientApi;
  readonly worker: (handler: () => Promise<null>) => WorkerApi;
  close(): Promise<void>;
}

/** Runs the jobs through `side` on `server`: cost per job and process, and commits per job. */
async function runDocket(server: TestNatsServer, side: DocketSide): Promise<Record<string, unknown>> {
  let handled = 0;
  let done!: () => void;
  const allHandled = new Promise<void>((resolve) => (done = resolve));
  const worker = side.worker(async () => (++handled === n ? done() : undefined, null));
  await worker.start();
  try {
    const commits0 = await commitsIn(server.url);
    const measured = await measure(side.pids, async () => {
      await submitInChunks(side.client, 'serial', n, CHUNK);
      await allHandled;
      if (worker.counts) await acknowledged(worker, n);
    });
    return { ...measured, commits_per_job: +(((await commitsIn(server.url)) - commits0) / n).toFixed(2) };
  } finally {
    await worker.close();
    await side.client.close();
    await side.close();
  }
}

/** The node as `docket up`, the client and worker in this process. */
async function docket(): Promise<Record<string, unknown>> {
  const server = await startNatsServer();
  const dir = tempDir('serial-path');
  const node = await startDocketNode(server.url, dir.path, 'cli');
  const Worker = await workerClass();
  try {
    return await runDocket(server, {
      pids: { node: node.pid, nats: server.process.pid!, bench: 'self' },
      client: await connectClient(server.url),
      worker: (handler) => new Worker({ servers: server.url, queue: 'serial', concurrency, handler }),
      close: () => node.close(),
    });
  } finally {
    await server.stop();
    dir.remove();
  }
}

/** The same jobs with the node in this process and the worker and the client embedded in it (`local: node`). */
async function embedded(): Promise<Record<string, unknown>> {
  const server = await startNatsServer();
  const dir = tempDir('serial-path-embedded');
  const { startNode } = await import('../src/node.js');
  const { Worker } = await import('../src/client/worker.js');
  const node = await startNode({ servers: server.url, dataDir: dir.path });
  try {
    return await runDocket(server, {
      pids: { nats: server.process.pid!, bench: 'self' },
      client: await connectLocalClient(node),
      worker: (handler) => new Worker({ local: node, queue: 'serial', concurrency, handler }),
      close: () => node.close(),
    });
  } finally {
    await server.stop();
    dir.remove();
  }
}

async function bullmq(): Promise<Record<string, unknown>> {
  const redis = await startRedis('aof');
  const queue = new Queue('serial', { connection: connection(redis) });
  await queue.waitUntilReady();
  let completed = 0;
  let done!: () => void;
  const allDone = new Promise<void>((resolve) => (done = resolve));
  const worker = new BullWorker('serial', async () => null, { connection: connection(redis), concurrency });
  worker.on('completed', () => {
    if (++completed === n) done();
  });
  await worker.waitUntilReady();
  try {
    return await measure({ redis: redis.pid, bench: 'self' }, async () => {
      await addBulk(queue, n, CHUNK);
      await allDone;
    });
  } finally {
    await worker.close();
    await queue.close();
    await redis.stop();
  }
}

// SYSTEMS=embedded,... runs only those (a profile of one of them).
const systems = (process.env['SYSTEMS'] ?? 'docket,docket_embedded,bullmq').split(',');
const runs: Record<string, () => Promise<Record<string, unknown>>> = { docket, docket_embedded: embedded, bullmq };
for (const system of systems) console.log(JSON.stringify({ jobs: n, concurrency, [system]: await runs[system]!() }));
process.exit(0);
