/**
 * Job set refresh (issue 14, Performance): `docket.cmd.refresh` of a PostgreSQL key source of
 * `keys` rows (1,000,000; 100,000 under --quick) into an empty job set, and a second refresh that
 * adds nothing, beside a bare `SELECT` of the same keys (pg, one result, in this process) and
 * docket's bulk keyed submit of as many keys (submitBatch in batches of 10,000, the command's
 * bound), all in the same run against the same node. Keys per second each.
 *
 * The table lives in the machine's PostgreSQL (127.0.0.1:5432, user postgres, database test)
 * under a unique name for the group's runs, and is dropped after them; without a reachable
 * PostgreSQL the rows say "not available" with the reason. The SELECT and the second refresh
 * are each measured twice, alternately, and the better of each is kept: both are short reads
 * on a shared machine, and one stall of either would otherwise decide the ratio.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { connectClient, type ClientApi } from '../lib/docket.js';
import { withDocket, type BenchEnv } from '../lib/env.js';
import { measured, NotAvailableError, type Group, type Measurement } from '../lib/harness.js';

const PG = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' } as const;
const PG_URL = `postgres://${PG.user}@${PG.host}:${PG.port}/${PG.database}`;
/** The submit command's bound on a batch. */
const SUBMIT_BATCH = 10_000;
const REFRESH_TIMEOUT_MS = 1_800_000;

/** The keys: (subject_id, session_id), 100 sessions a subject, as DataJoint pipelines often hold. */
const keyOf = (i: number) => ({ subject_id: Math.floor(i / 100), session_id: i % 100 });

async function connectPostgres(): Promise<pg.Client> {
  const db = new pg.Client({ ...PG, connectionTimeoutMillis: 5_000 });
  db.on('error', () => undefined);
  try {
    await db.connect();
  } catch (err: unknown) {
    throw new NotAvailableError(`PostgreSQL ${PG.host}:${PG.port} (database ${PG.database}) unreachable: ${err instanceof Error ? err.message : String(err)}`);
  }
  return db;
}

const perSecond = (count: number, ms: number) => (count / ms) * 1000;

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const start = performance.now();
  const result = await fn();
  return [result, performance.now() - start];
}

/** Items refused as `unavailable` (the queue's leadership moving) are sent again, as a client must. */
const SUBMIT_ATTEMPTS = 5;

async function bulkKeyedSubmit(client: ClientApi, keys: number): Promise<void> {
  for (let start = 0; start < keys; start += SUBMIT_BATCH) {
    let batch = Array.from({ length: Math.min(SUBMIT_BATCH, keys - start) }, (_, i) => ({ queue: 'bench-submit', key: keyOf(start + i) }));
    for (let attempt = 1; batch.length > 0; attempt++) {
      const replies = (await client.submitBatch(batch)).jobs;
      const refused = batch.filter((_, i) => !replies[i]!.ok);
      const other = replies.find((j) => !j.ok && j.error?.code !== 'unavailable');
      if (other !== undefined || (refused.length > 0 && attempt === SUBMIT_ATTEMPTS)) throw new Error(`${refused.length} keyed submits refused: ${JSON.stringify((other ?? replies.find((j) => !j.ok))?.error)}`);
      batch = refused;
    }
  }
}

async function docketRefresh(env: BenchEnv, table: () => string, keys: number): Promise<Measurement> {
  const db = await connectPostgres();
  const select = `SELECT subject_id, session_id FROM ${table()}`;
  try {
    return await withDocket(env, async (run) => {
      const client = await connectClient(run.url, { requestTimeoutMs: REFRESH_TIMEOUT_MS });
      try {
        const bareSelect = async () => {
          const [result, ms] = await timed(() => db.query(select));
          if (result.rowCount !== keys) throw new Error(`SELECT gave ${result.rowCount} rows, not ${keys}`);
          return perSecond(keys, ms);
        };
        const refresh = async (expectAdded: number) => {
          const [reply, ms] = await timed(() => client.refresh!({ queue: 'bench-set' }));
          if (reply.added !== expectAdded) throw new Error(`refresh added ${reply.added}, not ${expectAdded}`);
          return perSecond(keys, ms);
        };
        await client.putJobSet!({ queue: 'bench-set', key_source: { url: PG_URL, sql: select } });
        const m = await measured(run.roles(), async () => {
          const first = await refresh(keys);
          const selects: number[] = [];
          const seconds: number[] = [];
          for (let i = 0; i < 2; i++) {
            selects.push(await bareSelect());
            seconds.push(await refresh(0));
          }
          const refreshes = { first, select: Math.max(...selects), second: Math.max(...seconds) };
          try {
            const [, submitMs] = await timed(() => bulkKeyedSubmit(client, keys));
            return { values: { ...refreshes, bulk: perSecond(keys, submitMs) } };
          } catch (err: unknown) {
            // The refresh figures stand; the first refresh's row then says its peer is missing.
            return { values: refreshes, bulkError: err instanceof Error ? err.message : String(err) };
          }
        });
        return { values: m.result.values, cpu: m.cpu, extra: { keys, node: run.node.mode, submit_batch: SUBMIT_BATCH, ...('bulkError' in m.result ? { bulk_error: m.result.bulkError } : {}) } };
      } finally {
        await client.close();
      }
    });
  } finally {
    await db.end().catch(() => undefined);
  }
}

export function jobsetRefreshGroup(env: BenchEnv): Group {
  const keys = env.config.quick ? 100_000 : 1_000_000;
  const count = keys.toLocaleString('en-US');
  let table = '';
  return {
    name: 'jobset_refresh',
    // A full run's first refresh and bulk submit of a million keys take minutes each.
    reps: env.config.quick ? 3 : 1,
    async setup() {
      const db = await connectPostgres();
      try {
        table = `docket_bench_refresh_${randomBytes(4).toString('hex')}`;
        await db.query(`CREATE TABLE ${table} AS SELECT g / 100 AS subject_id, g % 100 AS session_id FROM generate_series(0, ${keys - 1}) g`);
      } finally {
        await db.end();
      }
    },
    async teardown() {
      if (table === '') return;
      const db = await connectPostgres();
      try {
        await db.query(`DROP TABLE IF EXISTS ${table}`);
      } finally {
        await db.end();
      }
    },
    systems: {
      docket: () => docketRefresh(env, () => table, keys),
    },
    rows: [
      {
        scenario: 'jobset_refresh.first',
        title: `job set refresh of a ${count}-key PostgreSQL source into an empty job set (read, plan, ${count} keyed job.submitted)`,
        unit: 'keys/s',
        better: 'higher',
        docket: 'docket.first',
        peer: 'docket.bulk',
        peerLabel: `docket bulk keyed submit, same run (batches of ${SUBMIT_BATCH.toLocaleString('en-US')})`,
        target: { on: 'ratio', op: '>=', limit: 1, text: '≥ bulk submit rate' },
      },
      {
        scenario: 'jobset_refresh.second',
        title: `second refresh of the same ${count} keys, nothing to add (read and plan only)`,
        unit: 'keys/s',
        better: 'higher',
        docket: 'docket.second',
        peer: 'docket.select',
        peerLabel: 'bare SELECT of the same keys (pg, one result), same run',
        target: { on: 'ratio', op: '>=', limit: 0.5, text: '≥ 50% of the bare SELECT' },
        note: 'the bare SELECT and the second refresh are each measured twice, alternately, and the better of each kept',
      },
    ],
  };
}
