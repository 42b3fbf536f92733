/**
 * The tail's solo mode, A/B in one run: a node (its own process, fresh nats-server each time)
 * whose tail always follows the stream, against one that stops following while it is the only
 * writer. Bulk submit (chunks of 1,000) and end to end (worker concurrency 100, half as many
 * jobs), three rounds, alternating. Started 2.5 s after "serving", so the solo node is solo.
 *
 *   npx tsx bench/tail-solo-ab.ts [jobs=100000]
 */
import { Client, Worker } from '../src/index.js';
import { median } from './lib/harness.js';
import { startTailNode, TAIL_MODES, type TailMode } from './lib/tail-solo.js';
import { submitInChunks } from './lib/workload.js';

const jobs = Number(process.argv[2] ?? 100_000);
const rows: { mode: TailMode; bulk: number; e2e: number }[] = [];

for (let round = 0; round < 3; round++) {
  for (const mode of TAIL_MODES) {
    const node = await startTailNode(mode);
    const client = await Client.connect({ servers: node.url });
    let t0 = performance.now();
    await submitInChunks(client, 'bulk', jobs, 1_000);
    const bulk = jobs / ((performance.now() - t0) / 1000);
    const followingInBulk = node.following();

    const e2eJobs = jobs / 2;
    let handled = 0;
    let done!: () => void;
    const allHandled = new Promise<void>((resolve) => (done = resolve));
    const worker = new Worker({ servers: node.url, queue: 'e2e', concurrency: 100, handler: async () => {
      if (++handled === e2eJobs) done();
      return null;
    } });
    await worker.start();
    t0 = performance.now();
    await submitInChunks(client, 'e2e', e2eJobs, 1_000);
    await allHandled;
    const e2e = e2eJobs / ((performance.now() - t0) / 1000);
    rows.push({ mode, bulk, e2e });
    process.stdout.write(`${JSON.stringify({ round, mode, bulk_jobs_per_s: Math.round(bulk), e2e_c100_jobs_per_s: Math.round(e2e), following_during_bulk: followingInBulk, following_at_end: node.following() })}\n`);
    await worker.close();
    await client.close();
    await node.stop();
  }
}
for (const metric of ['bulk', 'e2e'] as const) {
  const of = (mode: TailMode) => median(rows.filter((r) => r.mode === mode).map((r) => r[metric]));
  process.stdout.write(`${metric}: solo ${Math.round(of('solo'))} vs following ${Math.round(of('follow'))} jobs/s (median of 3) = ${(of('solo') / of('follow')).toFixed(2)}x\n`);
}
