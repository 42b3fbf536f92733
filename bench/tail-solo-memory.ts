/**
 * Resident memory per queued job with the tail following the stream against solo, in one run: a
 * node (its own process, bench/tail-solo-node.ts, fresh nats-server each time) is filled with
 * `jobs` jobs in chunks of 10,000, as the large-queue rows are, and its RSS growth divided by the
 * jobs. Separates what the solo mode did to `memory.per_queued_job` from other changes.
 *
 *   npx tsx bench/tail-solo-memory.ts [jobs=1000000]
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { startNatsServer } from '../test/support/nats-server.js';
import { Client } from '../src/index.js';

const jobs = Number(process.argv[2] ?? 1_000_000);
const rssOf = (pid: number): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

for (const mode of ['follow', 'solo']) {
  const server = await startNatsServer();
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/tail-solo-node.ts', server.url, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('serving') && resolve()));
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const client = await Client.connect({ servers: server.url });
  const before = rssOf(child.pid!);
  for (let offset = 0; offset < jobs; offset += 10_000) {
    await client.submitBatch(Array.from({ length: Math.min(10_000, jobs - offset) }, (_, i) => ({ queue: 'large', params: { i: offset + i, image: `s3://uploads/${offset + i}.jpg` } })));
  }
  const after = rssOf(child.pid!);
  process.stdout.write(`${JSON.stringify({ mode, jobs, rss_bytes_per_job: Math.round((after - before) / jobs) })}\n`);
  await client.close();
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  await server.stop();
}
