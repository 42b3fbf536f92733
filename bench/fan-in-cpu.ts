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
import { counter, FAN_CHILDREN, submitDocketFlows } from './scenarios/fan-in.js';

const parents = Number(process.argv[2] ?? 1000);
const mode = process.argv[3] === 'plain' ? 'plain' : 'fan';
const warm = Number(process.env['WARM'] ?? 0);
const PER_CHUNK = 100;

const server = await startNatsServer();
const dir = tempDir('fan-in-cpu');
const node = await startDocketNode(server.url, dir.path, 'cli');
const client = await connectClient(server.url);
const Worker = await workerClass();
const handled = counter();
const worker = new Worker({
  servers: server.url,
  queue: 'fan',
  concurrency: 100,
  handler: async () => {
    handled.tick();
    return null;
  },
});
await worker.start();

await submitDocketFlows(client, 'fan', -warm, 0, PER_CHUNK, true);
const warmJobs = warm * (FAN_CHILDREN + 1);
await handled.reach(warmJobs);
const total = parents * (FAN_CHILDREN + 1);
const node0 = cpuSecondsOf(node.pid)!;
const nats0 = cpuSecondsOf(server.process.pid!)!;
const bench0 = process.cpuUsage();
const t0 = performance.now();
await submitDocketFlows(client, 'fan', 0, parents, PER_CHUNK, mode === 'fan');
await handled.reach(warmJobs + total);
const seconds = (performance.now() - t0) / 1000;
const bench = process.cpuUsage(bench0);
const perJob = (s: number): number => Math.round((s * 1e6) / total);
console.log(JSON.stringify({ mode, warm_jobs: warmJobs, jobs: total, rate: Math.round(total / seconds), node_us_per_job: perJob(cpuSecondsOf(node.pid)! - node0), nats_us_per_job: perJob(cpuSecondsOf(server.process.pid!)! - nats0), bench_us_per_job: perJob((bench.user + bench.system) / 1e6) }));
await worker.close();
await client.close();
await node.close();
await server.stop();
dir.remove();
process.exit(0);
