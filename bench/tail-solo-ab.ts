/**
 * The tail's solo mode, A/B in one run: a node (its own process, fresh nats-server each time)
 * whose tail always follows the stream, against one that stops following while it is the only
 * writer. Bulk submit (chunks of 1,000) and end to end (worker concurrency 100, half as many
 * jobs), three rounds, alternating. Started 2.5 s after "serving", so the solo node is solo.
 *
 *   npx tsx bench/tail-solo-ab.ts [jobs=100000]
 */
import { spawn } from 'node:child_process';
import { startNatsServer } from '../test/support/nats-server.js';
import { Client, Worker } from '../src/index.js';

const jobs = Number(process.argv[2] ?? 100_000);
const rows: { mode: string; bulk: number; e2e: number }[] = [];

async function submitAll(client: Client, queue: string, n: number): Promise<void> {
  for (let offset = 0; offset < n; offset += 1_000) {
    await client.submitBatch(Array.from({ length: Math.min(1_000, n - offset) }, (_, i) => ({ queue, params: { i: offset + i, image: `s3://uploads/${offset + i}.jpg` } })));
  }
}

for (let round = 0; round < 3; round++) {
  for (const mode of ['follow', 'solo']) {
    const server = await startNatsServer();
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/tail-solo-node.ts', server.url, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
    let following = '';
    await new Promise<void>((resolve) =>
      child.stdout!.on('data', (chunk: Buffer) => {
        const text = chunk.toString();
        if (text.includes('serving')) resolve();
        following = /following=(\w+)\n$/.exec(text)?.[1] ?? following;
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    const client = await Client.connect({ servers: server.url });
    let t0 = performance.now();
    await submitAll(client, 'bulk', jobs);
    const bulk = jobs / ((performance.now() - t0) / 1000);
    const followingInBulk = following;

    const e2eJobs = jobs / 2;
    let handled = 0;
    let done!: () => void;
    const allHandled = new Promise<void>((resolve) => (done = resolve));
    const worker = new Worker({ servers: server.url, queue: 'e2e', concurrency: 100, handler: async () => {
      if (++handled === e2eJobs) done();
      return null;
    } });
    await worker.start();
    t0 = performance.now();
    await submitAll(client, 'e2e', e2eJobs);
    await allHandled;
    const e2e = e2eJobs / ((performance.now() - t0) / 1000);
    rows.push({ mode, bulk, e2e });
    process.stdout.write(`${JSON.stringify({ round, mode, bulk_jobs_per_s: Math.round(bulk), e2e_c100_jobs_per_s: Math.round(e2e), following_during_bulk: followingInBulk, following_at_end: following })}\n`);
    await worker.close();
    await client.close();
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    await server.stop();
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const metric of ['bulk', 'e2e'] as const) {
  const solo = median(rows.filter((r) => r.mode === 'solo').map((r) => r[metric]));
  const follow = median(rows.filter((r) => r.mode === 'follow').map((r) => r[metric]));
  process.stdout.write(`${metric}: solo ${Math.round(solo)} vs following ${Math.round(follow)} jobs/s (median of 3) = ${(solo / follow).toFixed(2)}x\n`);
}
