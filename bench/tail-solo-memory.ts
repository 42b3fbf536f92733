/**
 * Resident memory per queued job with the tail following the stream against solo, in one run: a
 * node (its own process, bench/tail-solo-node.ts, fresh nats-server each time) is filled with
 * `jobs` jobs in chunks of 10,000, as the large-queue rows are, and its RSS growth divided by the
 * jobs. Separates what the solo mode did to `memory.per_queued_job` from other changes.
 *
 *   npx tsx bench/tail-solo-memory.ts [jobs=1000000]
 */
import { Client } from '../src/index.js';
import { rssBytesOf } from './lib/procs.js';
import { startTailNode, TAIL_MODES } from './lib/tail-solo.js';
import { submitInChunks } from './lib/workload.js';

const jobs = Number(process.argv[2] ?? 1_000_000);

for (const mode of TAIL_MODES) {
  const node = await startTailNode(mode);
  const client = await Client.connect({ servers: node.url });
  const rss = (): number => rssBytesOf(node.pid) ?? Number.NaN;
  const before = rss();
  await submitInChunks(client, 'large', jobs, 10_000);
  const after = rss();
  process.stdout.write(`${JSON.stringify({ mode, jobs, rss_bytes_per_job: Math.round((after - before) / jobs) })}\n`);
  await client.close();
  await node.stop();
}
