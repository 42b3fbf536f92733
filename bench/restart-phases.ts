/**
 * Restart with a large history, phase by phase, without the whole large_queue group:
 *   npx tsx bench/restart-phases.ts <jobs> <dir> [restarts]
 * The first run fills `<dir>` (a nats-server store and a docket data directory) with `<jobs>`
 * queued jobs through a node of its own (`docket up`, as the bench runs it), then closes it (a
 * checkpoint is written). Every run then starts the node `restarts` times on that state, and once
 * on an empty log beside it, and prints each start's time to `serving`, the time to the first job
 * a worker claims, and the node's own start-up lines (checkpoint restored, log folded, serving).
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startNatsServer } from '../test/support/nats-server.js';
import { connectClient, startDocketNode, tempDir, workerClass, defaultNodeMode } from './lib/docket.js';
import { submitInChunks } from './lib/workload.js';
import { sleep } from './lib/harness.js';
import { rssBytesOf } from './lib/procs.js';

const [jobsArg, dir, restartsArg] = process.argv.slice(2);
if (!jobsArg || !dir) {
  process.stderr.write('usage: restart-phases.ts <jobs> <dir> [restarts]\n');
  process.exit(2);
}
const jobs = Number(jobsArg);
const restarts = Number(restartsArg ?? 3);
const mode = defaultNodeMode();
const storeDir = join(dir, 'nats');
const dataDir = join(dir, 'docket');
const fresh = !existsSync(storeDir);
mkdirSync(storeDir, { recursive: true });
mkdirSync(dataDir, { recursive: true });

const nats = await startNatsServer({ storeDir });
try {
  if (fresh) {
    // As the bench does: a start and close on the empty log first (its close writes an empty checkpoint).
    await (await startDocketNode(nats.url, dataDir, mode)).close();
    const node = await startDocketNode(nats.url, dataDir, mode);
    const client = await connectClient(nats.url, { requestTimeoutMs: 60_000 });
    const t0 = performance.now();
    await submitInChunks(client, 'large', jobs, 10_000);
    process.stdout.write(`filled ${jobs} jobs in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
    await client.close();
    const closing = performance.now();
    await node.close();
    process.stdout.write(`closed (checkpoint written) in ${((performance.now() - closing) / 1000).toFixed(1)} s\n`);
  }
  const Worker = await workerClass();
  for (let i = 0; i < restarts; i++) {
    const t0 = performance.now();
    const node = await startDocketNode(nats.url, dataDir, mode, 300_000);
    let firstClaim = NaN;
    let got!: () => void;
    const claimed = new Promise<void>((resolve) => (got = resolve));
    const worker = new Worker({
      servers: nats.url,
      queue: 'large',
      concurrency: 1,
      claimWaitMs: 250,
      handler: async () => {
        if (Number.isNaN(firstClaim)) {
          firstClaim = performance.now() - t0;
          got();
        }
        return null;
      },
    });
    await worker.start();
    await Promise.race([claimed, sleep(30_000)]);
    await worker.close();
    const rss = rssBytesOf(node.pid);
    process.stdout.write(`restart ${i + 1}: serving ${Math.round(node.startMs)} ms, first claim ${Math.round(firstClaim)} ms, node RSS ${rss === null ? '?' : Math.round(rss / 2 ** 20)} MiB\n`);
    for (const line of node.startLog) {
      const parsed = JSON.parse(line.startsWith('{') ? line : '{}') as Record<string, unknown>;
      if (typeof parsed['msg'] !== 'string') continue;
      const { msg, ms, phases, seq, jobs: count, events } = parsed;
      process.stdout.write(`    ${String(msg)} ${JSON.stringify({ ms, seq, jobs: count, events, ...(phases === undefined ? {} : { phases }) })}\n`);
    }
    await node.close();
  }
  const empty = tempDir('docket-restart-empty-');
  const emptyNats = await startNatsServer();
  try {
    const node = await startDocketNode(emptyNats.url, empty.path, mode);
    process.stdout.write(`empty log: serving ${Math.round(node.startMs)} ms\n`);
    await node.close();
  } finally {
    await emptyNats.stop();
    empty.remove();
  }
} finally {
  await nats.stop({ keepStore: true });
}
