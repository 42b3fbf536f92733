/**
 * Finished jobs' bodies under a steady load (issue 12 item 7: flat body memory under 1,000
 * jobs/s for 10 minutes). One process: nats-server, a node with a short retention, a client
 * submitting `rate` jobs a second in batches every 100 ms, and an SDK Worker running them. Every
 * `sampleS` seconds, after a full GC, it prints the bodies in memory, the evicted jobs, the heap
 * and the ArrayBuffers (where the compact index lives). Flat bodies and a heap that grows only
 * by the compact index's ~90 bytes per job are what it shows.
 *
 *   node --expose-gc --import tsx bench/evict-steady.ts [seconds=600] [rate=1000] [retentionMs=10000] [sampleS=30]
 */
import { Client } from '../src/client/client.js';
import { Worker } from '../src/client/worker.js';
import { startNode } from '../src/node.js';
import { startNatsServer } from '../test/support/nats-server.js';
import { docketJobs } from './lib/workload.js';

const seconds = Number(process.argv[2] ?? 600);
const rate = Number(process.argv[3] ?? 1_000);
const retentionMs = Number(process.argv[4] ?? 10_000);
const sampleS = Number(process.argv[5] ?? 30);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  process.stderr.write('run with node --expose-gc --import tsx bench/evict-steady.ts\n');
  process.exit(2);
}

const nats = await startNatsServer();
const node = await startNode({ servers: nats.url, finishedRetentionMs: retentionMs });
const client = await Client.connect({ servers: nats.url });
const worker = new Worker({ servers: nats.url, queue: 'steady', concurrency: 200, handler: () => null });
await worker.start();
const started = performance.now();
let submitted = 0;
const sample = () => {
  gc();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  const elapsedS = Math.round((performance.now() - started) / 1000);
  process.stdout.write(`${JSON.stringify({ elapsed_s: elapsedS, submitted, succeeded: worker.counts.succeeded, bodies_in_memory: node.store.size, evicted: node.store.evictedCount, heap_mb: +(heapUsed / 2 ** 20).toFixed(1), array_buffers_mb: +(arrayBuffers / 2 ** 20).toFixed(1) })}\n`);
};
const sampler = setInterval(sample, sampleS * 1000);
try {
  const perTick = Math.round(rate / 10);
  for (let tick = 0; tick < seconds * 10; tick++) {
    const due = started + tick * 100;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    await client.submitBatch(docketJobs('steady', perTick, submitted));
    submitted += perTick;
  }
  sample();
} finally {
  clearInterval(sampler);
  await worker.close();
  await client.close();
  await node.close();
  await nats.stop();
}
