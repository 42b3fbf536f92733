/**
 * The latency loop's tail: the loop of bench/latency-probe.ts (node, Worker, client in one
 * process) with every garbage collection pause recorded (perf_hooks 'gc' entries), and how many
 * of the slowest 1% of jobs overlapped one. What GC explains of the p99; the rest is the machine.
 *
 *   npx tsx bench/latency-p99.ts [jobs=2000]
 *   EMBEDDED=1 WARMUP=3000 npx tsx bench/latency-p99.ts 3000   # the embedded rows' path, warm
 *
 * EMBEDDED=1 gives the client and the Worker the node as `local` (README "Embedded workers");
 * WARMUP jobs (default 50) run first, not counted: a fresh process runs unoptimised code for its
 * first ~2,000 jobs.
 */
import { PerformanceObserver } from 'node:perf_hooks';
import { Client } from '../src/client/client.js';
import { Worker } from '../src/client/worker.js';
import { startNode } from '../src/node.js';
import { startNatsServer } from '../test/support/nats-server.js';
const gcs: { start: number; end: number }[] = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) gcs.push({ start: e.startTime, end: e.startTime + e.duration }); }).observe({ entryTypes: ['gc'] });
const n = Number(process.argv[2] ?? 2000);
const server = await startNatsServer();
const node = await startNode({ servers: server.url, nodeName: 'p99' });
const place = process.env.EMBEDDED === '1' ? { local: node } : { servers: server.url };
const warmup = Number(process.env.WARMUP ?? 50);
const client = await Client.connect(place);
const watcher = await Client.connect(place);
const worker = new Worker({ ...place, queue: 'lat', concurrency: 1, handler: async () => null });
await worker.start();
const waiting = new Map<string, () => void>(); const early = new Set<string>();
const abort = new AbortController();
const events = watcher.live({ queue: 'lat', types: ['job.succeeded'], signal: abort.signal });
await events.ready;
void (async () => { for await (const e of events) { const r = waiting.get(e.aggregate.id); if (r) r(); else early.add(e.aggregate.id); } })().catch(() => undefined);
const it: { t0: number; t1: number }[] = [];
for (let i = 0; i < n + warmup; i++) {
  const t0 = performance.now();
  const { job_id } = await client.submit({ queue: 'lat', params: { i } });
  if (!early.delete(job_id)) { await new Promise<void>((r) => waiting.set(job_id, r)); waiting.delete(job_id); }
  if (i >= warmup) it.push({ t0, t1: performance.now() });
}
const d = it.map((x) => x.t1 - x.t0).sort((a, b) => a - b);
const p = (q: number) => d[Math.floor(d.length * q)]!;
const slow = it.filter((x) => x.t1 - x.t0 >= p(0.99));
const withGc = slow.filter((x) => gcs.some((g) => g.end > x.t0 && g.start < x.t1));
const gcIn = gcs.filter((g) => g.start >= it[0]!.t0);
const gcMs = gcIn.map((g) => g.end - g.start).sort((a, b) => a - b);
console.log(JSON.stringify({ jobs: n, p50: p(0.5).toFixed(2), p99: p(0.99).toFixed(2), max: d[d.length - 1]!.toFixed(2), slowest_1pct: slow.length, of_them_overlapping_gc: withGc.length, gc_pauses: gcIn.length, gc_p50_ms: gcMs[Math.floor(gcMs.length / 2)]?.toFixed(2), gc_max_ms: gcMs[gcMs.length - 1]?.toFixed(2), iterations_overlapping_gc: it.filter((x) => gcs.some((g) => g.end > x.t0 && g.start < x.t1)).length }));
abort.abort(); await worker.close(); await client.close(); await watcher.close(); await node.close(); await server.stop(); process.exit(0);
