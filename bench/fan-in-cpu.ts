/**
 * CPU per job of the fan-in workload (the docket side of bench/scenarios/fan-in.ts: children in
 * batches, then their parents with `depends_on`), or of the same jobs with no dependencies
 * (`plain`), with an optional warm-up of the same shape first: what a parent's release costs, and
 * what a cold JIT costs (README "Performance", fan-in). Docket only, one run.
 *
 *   WARM=<parents> npx tsx bench/fan-in-cpu.ts [parents=1000] [fan|plain]
 */
import { startNatsServer } from '../test/support/nats-server.js';
import { connectClient, startDocketNode, tempDir, workerClass } from './lib/docket.js';
import { cpuSecondsOf } from './lib/procs.js';
import { jobParams } from './lib/workload.js';

const parents = Number(process.argv[2] ?? 1000);
const mode = process.argv[3] === 'plain' ? 'plain' : 'fan';
const warm = Number(process.env['WARM'] ?? 0);
const CHILDREN = 9;
const PER_CHUNK = 100;

const server = await startNatsServer();
const dir = tempDir('fan-in-cpu');
const node = await startDocketNode(server.url, dir.path, 'cli');
const client = await connectClient(server.url);
const Worker = await workerClass();
let handled = 0;
let goal = Number.POSITIVE_INFINITY;
let reached: () => void = () => {};
const worker = new Worker({
  servers: server.url,
  queue: 'fan',
  concurrency: 100,
  handler: async () => {
    if (++handled === goal) reached();
    return null;
  },
});
await worker.start();
const until = (n: number): Promise<void> => (handled >= n ? Promise.resolve() : new Promise((resolve) => ((goal = n), (reached = resolve))));

/** Parents [from, to) and their children, a chunk at a time, as the bench submits them. */
async function submitFlows(from: number, to: number, withDependencies: boolean): Promise<void> {
  for (let p0 = from; p0 < to; p0 += PER_CHUNK) {
    const count = Math.min(PER_CHUNK, to - p0);
    const made = await client.submitBatch(Array.from({ length: count * CHILDREN }, (_, i) => ({ queue: 'fan', params: jobParams(p0 * CHILDREN + i) })));
    const ids = made.jobs.map((j) => j.job_id ?? '');
    await client.submitBatch(Array.from({ length: count }, (_, k) => ({ queue: 'fan', params: jobParams(1_000_000 + p0 + k), ...(withDependencies ? { depends_on: ids.slice(k * CHILDREN, (k + 1) * CHILDREN) } : {}) })));
  }
}

await submitFlows(-warm, 0, true);
await until(warm * (CHILDREN + 1));
const total = parents * (CHILDREN + 1);
const node0 = cpuSecondsOf(node.pid)!;
const nats0 = cpuSecondsOf(server.process.pid!)!;
const bench0 = process.cpuUsage();
const t0 = performance.now();
await submitFlows(0, parents, mode === 'fan');
await until(warm * (CHILDREN + 1) + total);
const seconds = (performance.now() - t0) / 1000;
const bench = process.cpuUsage(bench0);
const perJob = (s: number): number => Math.round((s * 1e6) / total);
console.log(JSON.stringify({ mode, warm_jobs: warm * (CHILDREN + 1), jobs: total, rate: Math.round(total / seconds), node_us_per_job: perJob(cpuSecondsOf(node.pid)! - node0), nats_us_per_job: perJob(cpuSecondsOf(server.process.pid!)! - nats0), bench_us_per_job: perJob((bench.user + bench.system) / 1e6) }));
await worker.close();
await client.close();
await node.close();
await server.stop();
dir.remove();
process.exit(0);
