/**
 * End to end with a worker of its own, its slots (100, or `SLOTS`) split over `lanes` Workers,
 * each started once the previous one has its first job, so that one group's commit may fly while
 * another group's jobs run. Measures whether a node serving one batching worker
 * idles between that worker's commits (it would gain from lanes) or is CPU-bound (it would not).
 *
 *   [SLOTS=100] [HANDLER_MS=0] BENCH_NODE_DIST=1 npx tsx bench/worker-lanes.ts [jobs=30000] [lanes=1]
 */
import { startNatsServer } from '../test/support/nats-server.js';
import { connectClient, startDocketNode, tempDir, workerClass } from './lib/docket.js';
import { cpuSecondsOf } from './lib/procs.js';
import { submitInChunks } from './lib/workload.js';

const n = Number(process.argv[2] ?? 30_000);
const lanes = Number(process.argv[3] ?? 1);
const QUEUE = 'lanes';
/** Slots in all (`SLOTS`, 100 by default), split evenly over the lanes. */
const slots = Number(process.env['SLOTS'] ?? 100);
/** How long each job's handler takes (`HANDLER_MS`, a timer; 0 by default: no-op jobs). */
const handlerMs = Number(process.env['HANDLER_MS'] ?? 0);

/** A process's CPU so far (user + kernel), in ms. */
function cpuMs(pid: number): number {
  return (cpuSecondsOf(pid) ?? 0) * 1000;
}

const server = await startNatsServer();
const dir = tempDir('worker-lanes');
const node = await startDocketNode(server.url, dir.path, 'cli');
const Worker = await workerClass();
const client = await connectClient(server.url);
let handled = 0;
let allDone!: () => void;
const all = new Promise<void>((resolve) => (allDone = resolve));
let gotJob!: () => void;
let firstJob = new Promise<void>((resolve) => (gotJob = resolve));
const handler = async (): Promise<null> => {
  gotJob();
  if (handlerMs > 0) await new Promise((resolve) => setTimeout(resolve, handlerMs));
  if (++handled === n) allDone();
  return null;
};
const t0 = performance.now();
const node0 = cpuMs(node.pid);
const nats0 = cpuMs(server.process.pid!);
const submitting = submitInChunks(client, QUEUE, n, 1_000);
const workers = [];
for (let lane = 0; lane < lanes; lane++) {
  const worker = new Worker({ servers: server.url, queue: QUEUE, concurrency: slots / lanes, handler });
  await worker.start();
  workers.push(worker);
  await firstJob;
  firstJob = new Promise<void>((resolve) => (gotJob = resolve));
}
await submitting;
await all;
const seconds = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ jobs: n, lanes, rate: Math.round(n / seconds), node_cpu_pct: Math.round((cpuMs(node.pid) - node0) / 10 / seconds), nats_cpu_pct: Math.round((cpuMs(server.process.pid!) - nats0) / 10 / seconds) }));
for (const worker of workers) await worker.close();
await client.close();
await node.close();
await server.stop();
dir.remove();
process.exit(0);
