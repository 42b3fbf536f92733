/**
 * `npx tsx bench/jobset-keys.ts [keys]`: the parts of a job set refresh that exist so far (issue
 * 14), on the local PostgreSQL (127.0.0.1:5432, user postgres, database test), in one run:
 * a bare SELECT of the keys through pg, the same keys read through the key source (cursor +
 * normalisation), and the refresh planner on them, first into an empty job set (every key
 * added) and then with every key holding a job (nothing added). Keys per second each. The table
 * is created under a unique name and dropped. The command end to end is the jobset_refresh group
 * of `npm run bench`.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createKeySource, readAllKeys } from '../src/jobsets/source.js';
import { planRefresh, type PlanJob } from '../src/jobsets/plan.js';
import type { ResolvedRefreshSettings } from '../src/jobsets/settings.js';

const n = Number(process.argv[2] ?? 1_000_000);
const table = `docket_bench_keys_${randomBytes(4).toString('hex')}`;
const client = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' });
await client.connect();
const rate = (count: number, ms: number) => `${Math.round((count / ms) * 1000).toLocaleString('en')} keys/s (${(ms / 1000).toFixed(2)} s)`;
const time = async <T>(fn: () => Promise<T> | T): Promise<[T, number]> => {
  const start = performance.now();
  const result = await fn();
  return [result, performance.now() - start];
};
try {
  await client.query(`CREATE TABLE ${table} AS SELECT g / 100 AS subject_id, g % 100 AS session_id FROM generate_series(0, ${n - 1}) g`);
  const [bare, bareMs] = await time(() => client.query(`SELECT subject_id, session_id FROM ${table}`));
  process.stdout.write(`bare SELECT (pg, one result)      ${rate(bare.rowCount ?? 0, bareMs)}\n`);
  const source = createKeySource({ url: 'postgres://postgres@127.0.0.1:5432/test', sql: `SELECT subject_id, session_id FROM ${table}` }, { env: {} });
  const [keys, readMs] = await time(() => readAllKeys(source));
  process.stdout.write(`key source read (cursor + keys)   ${rate(keys.length, readMs)}\n`);
  const settings: ResolvedRefreshSettings = { keepCompleted: false, staleTimeoutS: 3600, orphanTimeoutS: null, priority: 5, delayMs: 0 };
  const now = Date.now();
  const [first, firstMs] = await time(() => planRefresh({ source: keys, jobs: [], settings, nowMs: now }));
  process.stdout.write(`plan, empty job set               ${rate(keys.length, firstMs)}  added ${first.counts.added}\n`);
  const jobs: PlanJob[] = keys.map((key, i) => ({ jobId: `j${i}`, key, status: 'pending', createdAtMs: now }));
  const [second, secondMs] = await time(() => planRefresh({ source: keys, jobs, settings, nowMs: now }));
  process.stdout.write(`plan, every key has a job         ${rate(keys.length, secondMs)}  added ${second.counts.added}\n`);
} finally {
  await client.query(`DROP TABLE IF EXISTS ${table}`);
  await client.end();
}
