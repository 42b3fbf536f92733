/**
 * Memory (V8 heap plus ArrayBuffers) held per finished, evicted job by a docket node (issue 12 item 7: at most 100 bytes),
 * after a full GC: heap with N evicted jobs minus heap before them, divided by N. The node runs
 * in this process on its own nats-server with a retention of 1 ms; an SDK Worker runs every job
 * (submitted, claimed, succeeded: three events, three positions each), so each evicted job is
 * what a real one leaves. The node's one-off allocations are made by a warm-up of the same kind.
 *
 *   node --expose-gc --import tsx bench/heap-per-evicted-job.ts [jobs=100000]
 */
import { Client } from '../src/client/client.js';
import { Worker } from '../src/client/worker.js';
import { startNode } from '../src/node.js';
import { startNatsServer } from '../test/support/nats-server.js';
import { submitInChunks } from './lib/workload.js';

const jobs = Number(process.argv[2] ?? 100_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  process.stderr.write('run with node --expose-gc --import tsx bench/heap-per-evicted-job.ts\n');
  process.exit(2);
}
const settle = async (): Promise<number> => {
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  gc();
  gc();
  // The compact index lives in typed arrays, whose bytes are outside the V8 heap: both count.
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
};

const nats = await startNatsServer();
const node = await startNode({ servers: nats.url, finishedRetentionMs: 1 });
const client = await Client.connect({ servers: nats.url });
const worker = new Worker({ servers: nats.url, queue: 'evict', concurrency: 200, handler: () => null });
await worker.start();
/** Runs n more jobs to their end and waits until every one was evicted. */
const runAndEvict = async (n: number): Promise<void> => {
  const target = node.store.evictedCount + n;
  await submitInChunks(client, 'evict', n, 10_000);
  while (node.store.evictedCount < target) await new Promise((resolve) => setTimeout(resolve, 50));
};
try {
  await runAndEvict(20_000); // warm-up: the arrays' first growth, the node's own allocations
  const before = await settle();
  const evictedBefore = node.store.evictedCount;
  await runAndEvict(jobs);
  const after = await settle();
  const evicted = node.store.evictedCount - evictedBefore;
  process.stdout.write(`${JSON.stringify({ jobs, evicted, bytes_per_evicted_job: Math.round((after - before) / evicted), bodies_in_memory: node.store.size, evicted_in_index: node.store.evictedCount })}\n`);
} finally {
  await worker.close();
  await client.close();
  await node.close();
  await nats.stop();
}
