/**
 * V8 heap held per queued job by a docket node, after a full GC: the live data, without the heap
 * slack that the RSS row (`memory.per_queued_job`) also counts. The node runs in this process on
 * its own nats-server; jobs are submitted in chunks of 10,000 like the large-queue fill.
 *
 *   node --expose-gc --import tsx bench/heap-per-job.ts [jobs=200000]
 */
import { startNatsServer } from '../test/support/nats-server.js';
import { startNode } from '../src/node.js';
import { Client } from '../src/client/client.js';
import { submitInChunks } from './lib/workload.js';

const jobs = Number(process.argv[2] ?? 200_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  process.stderr.write('run with node --expose-gc --import tsx bench/heap-per-job.ts\n');
  process.exit(2);
}
const settle = async (): Promise<number> => {
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

const nats = await startNatsServer();
const node = await startNode({ servers: nats.url });
const client = await Client.connect({ servers: nats.url });
try {
  const fill = (queue: string, n: number): Promise<void> => submitInChunks(client, queue, n, 10_000);
  await fill('warm-up', 10_000); // the node's own one-off allocations are not per job
  const before = await settle();
  await fill('large', jobs);
  const after = await settle();
  process.stdout.write(`${JSON.stringify({ jobs, heap_bytes_per_job: Math.round((after - before) / jobs), jobs_in_store: node.store.size })}\n`);
} finally {
  await client.close();
  await node.close();
  await nats.stop();
}
