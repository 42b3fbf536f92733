/**
 * The latency loop of bench/latency-probe.ts (a node in a process of its own, a Worker at
 * concurrency 1 and a client in this one), with each process's time on a core, time waiting
 * for one, and time slices per job, from /proc schedstat over the measured jobs (after the
 * warm-up). On two cores shared by the node, this process and nats-server, the waits are where
 * the p99 goes (README "Where docket misses").
 *
 *   [WARMUP=2000] [GOMAXPROCS=1] npx tsx bench/latency-waits.ts [jobs=3000]
 *
 * GOMAXPROCS reaches the nats-server this script starts (Go reads it; Node ignores it): the
 * comparison behind `docket up`'s one-thread local server (README "Set up, run, test"). Run
 * `npm run build` first: the node runs from dist/, as in `npm run bench`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer } from '../test/support/nats-server.js';
import { startDocketNode } from './lib/docket.js';
import { LatencyLoop, percentileMs } from './lib/latency-loop.js';
import { schedstatBetween, threadSchedstatsOf, type Schedstat } from './lib/procs.js';

process.env['BENCH_NODE_DIST'] ??= '1';
const n = Number(process.argv[2] ?? 3000);
const warmup = Number(process.env['WARMUP'] ?? 2000);
const server = await startNatsServer();
const dataDir = mkdtempSync(join(tmpdir(), 'latency-waits-'));
const node = await startDocketNode(server.url, dataDir, 'cli');
const loop = await LatencyLoop.start(server.url);

const pids: Record<string, number> = { node: node.pid, bench: process.pid, 'nats-server': server.process.pid! };
const sample = (): Record<string, Map<string, Schedstat> | null> => Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, threadSchedstatsOf(pid)]));
await loop.run(warmup);
const before = sample();
const { total } = await loop.run(n);
const after = sample();
const perJob: Record<string, { cpu_us: number; wait_us: number; slices: number } | null> = {};
for (const role of Object.keys(pids)) {
  const [start, end] = [before[role], after[role]];
  const d = start && end ? schedstatBetween(start, end) : null;
  perJob[role] = d && { cpu_us: Math.round(d.runNs / 1000 / n), wait_us: Math.round(d.waitNs / 1000 / n), slices: Number((d.slices / n).toFixed(1)) };
}
console.log(JSON.stringify({ jobs: n, warmup, gomaxprocs: process.env['GOMAXPROCS'] || 'default', p50_ms: Number(percentileMs(total, 50)), p99_ms: Number(percentileMs(total, 99)), per_job: perJob }));
await loop.close();
await node.close();
await server.stop();
rmSync(dataDir, { recursive: true, force: true });
process.exit(0);
