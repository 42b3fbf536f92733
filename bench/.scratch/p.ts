import { startRedis } from '../lib/procs.js';
import { Queue, Worker } from 'bullmq';
const r = await startRedis('aof');
const connection = { host: '127.0.0.1', port: r.port, maxRetriesPerRequest: null };
const q = new Queue('p', { connection });
let t = performance.now();
for (let c = 0; c < 20; c++) await q.addBulk(Array.from({ length: 1000 }, (_, i) => ({ name: 'j', data: { i } })));
console.log('addBulk/s', 20000 / ((performance.now() - t) / 1000));
for (const conc of [1, 10, 100]) {
  await q.obliterate({ force: true });
  const n = conc === 1 ? 3000 : 20000;
  let done = 0; let resolve!: () => void; const p = new Promise<void>((r) => (resolve = r));
  const w = new Worker('p', async () => null, { connection, concurrency: conc });
  w.on('completed', () => { if (++done === n) resolve(); });
  t = performance.now();
  for (let c = 0; c < n / 1000; c++) await q.addBulk(Array.from({ length: 1000 }, (_, i) => ({ name: 'j', data: { i } })));
  await p;
  console.log('e2e c', conc, n / ((performance.now() - t) / 1000));
  await w.close();
}
await q.close(); await r.stop();
