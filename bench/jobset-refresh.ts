/**
 * `npx tsx bench/jobset-refresh.ts [keys]`: `docket.cmd.refresh` end to end (issue 14) on the
 * local PostgreSQL (127.0.0.1:5432, user postgres, database test) and a nats-server of its own,
 * one node in this process: a bare SELECT of the keys through pg, the first refresh into an empty
 * job set (reads the source, plans, appends one keyed job.submitted per key) and a second refresh
 * that adds nothing, with bulk submit of the same number of keyed jobs beside them. Keys per
 * second each. The table is created under a unique name and dropped. `npm run bench -- --only
 * jobset_refresh` measures the same with the node in its own process (bench/scenarios/jobset-refresh.ts).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Client } from '../src/client/client.js';
import { startNode } from '../src/node.js';
import { startNatsServer } from '../test/support/nats-server.js';

const n = Number(process.argv[2] ?? 100_000);
const table = `docket_bench_refresh_${randomBytes(4).toString('hex')}`;
const url = 'postgres://postgres@127.0.0.1:5432/test';
const db = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' });
await db.connect();
const server = await startNatsServer();
const node = await startNode({ servers: server.url, nodeName: 'bench-refresh' });
const client = await Client.connect({ servers: server.url, requestTimeoutMs: 600_000 });
const rate = (count: number, ms: number) => `${Math.round((count / ms) * 1000).toLocaleString('en')} keys/s (${(ms / 1000).toFixed(2)} s)`;
const time = async <T>(fn: () => Promise<T>): Promise<[T, number]> => {
  const start = performance.now();
  const result = await fn();
  return [result, performance.now() - start];
};
try {
  await db.query(`CREATE TABLE ${table} AS SELECT g / 100 AS subject_id, g % 100 AS session_id FROM generate_series(0, ${n - 1}) g`);
  const [bare, bareMs] = await time(() => db.query(`SELECT subject_id, session_id FROM ${table}`));
  process.stdout.write(`bare SELECT (pg)                 ${rate(bare.rowCount ?? 0, bareMs)}\n`);

  await client.putJobSet({ queue: 'bench-set', key_source: { url, sql: `SELECT subject_id, session_id FROM ${table}` } });
  const [first, firstMs] = await time(() => client.refresh({ queue: 'bench-set' }));
  process.stdout.write(`refresh, empty job set           ${rate(n, firstMs)}  added ${first.added}\n`);
  const [second, secondMs] = await time(() => client.refresh({ queue: 'bench-set' }));
  process.stdout.write(`refresh, nothing to add          ${rate(n, secondMs)}  added ${second.added}\n`);

  // Bulk submit of as many keyed jobs, in batches of 10,000 (the submit command's bound).
  const [, submitMs] = await time(async () => {
    for (let start = 0; start < n; start += 10_000) {
      const jobs = Array.from({ length: Math.min(10_000, n - start) }, (_, i) => ({ queue: 'bench-submit', key: { subject_id: Math.floor((start + i) / 100), session_id: (start + i) % 100 } }));
      await client.submitBatch(jobs);
    }
  });
  process.stdout.write(`bulk keyed submit (10k batches)  ${rate(n, submitMs)}\n`);
} finally {
  await db.query(`DROP TABLE IF EXISTS ${table}`);
  await db.end();
  await client.close();
  await node.close();
  await server.stop();
}
