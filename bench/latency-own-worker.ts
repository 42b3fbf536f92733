/**
 * The latency loop with a worker of its own: the node as `docket up` in its own process, the
 * client and a Worker (concurrency 1) in this one; each job submitted once the previous one is
 * seen succeeded. Prints p50, p99 and max, the slowest 15 (index, ms since the start, latency)
 * and a histogram by whole milliseconds: whether the tail is a second mode (a timer, a missed
 * hand-over) or a spread (processes taking turns on the cores).
 *
 *   BENCH_NODE_DIST=1 npx tsx bench/latency-own-worker.ts [jobs=1000]
 */
import { Client } from '../src/client/client.js';
import { startNatsServer } from '../test/support/nats-server.js';
import { startDocketNode, tempDir, workerClass } from './lib/docket.js';

const n = Number(process.argv[2] ?? 1_000);
const WARM_UP = 50;
const server = await startNatsServer();
const dir = tempDir('latency-own-worker');
const node = await startDocketNode(server.url, dir.path, 'cli');
const Worker = await workerClass();
const client = await Client.connect({ servers: server.url });
const watcher = await Client.connect({ servers: server.url });
const worker = new Worker({ servers: server.url, queue: 'lat', concurrency: 1, handler: async () => null });
await worker.start();
const waiting = new Map<string, () => void>();
const early = new Set<string>();
const abort = new AbortController();
const events = watcher.live({ queue: 'lat', types: ['job.succeeded'], signal: abort.signal });
await events.ready;
void (async () => {
  for await (const event of events) {
    const resolve = waiting.get(event.aggregate.id);
    if (resolve) resolve();
    else early.add(event.aggregate.id);
  }
})().catch(() => undefined);

const latencies: { i: number; at: number; ms: number }[] = [];
const start = performance.now();
for (let i = 0; i < n + WARM_UP; i++) {
  const t0 = performance.now();
  const { job_id } = await client.submit({ queue: 'lat', params: { i } });
  if (!early.delete(job_id)) await new Promise<void>((resolve) => waiting.set(job_id, resolve));
  waiting.delete(job_id);
  if (i >= WARM_UP) latencies.push({ i, at: Math.round(t0 - start), ms: +(performance.now() - t0).toFixed(2) });
}
const sorted = [...latencies].sort((a, b) => a.ms - b.ms);
const histogram: Record<number, number> = {};
for (const { ms } of latencies) histogram[Math.floor(ms)] = (histogram[Math.floor(ms)] ?? 0) + 1;
console.log(JSON.stringify({ p50: sorted[Math.floor(n * 0.5)]!.ms, p99: sorted[Math.floor(n * 0.99)]!.ms, max: sorted[n - 1]!.ms }));
console.log(JSON.stringify({ slowest: sorted.slice(-15) }));
console.log(JSON.stringify({ histogram_ms: histogram }));
abort.abort();
await worker.close();
await client.close();
await watcher.close();
await node.close();
await server.stop();
dir.remove();
process.exit(0);
