/**
 * `docket populate` end to end (issue 14): the built CLI against a real node and nats-server, its
 * worker command a node script that writes its result row into a REAL PostgreSQL target table
 * (127.0.0.1:5432, user postgres, database test) in its own transaction. Refresh first (auto_refresh,
 * --no-refresh), --max-calls, --priority, --processes, ignored keys never run, a failing command
 * (exit 1, seed 000's error record: error_message of 2,047 characters, error_stack, user, host,
 * pid, connection id, version "git", duration), --suppress-errors, --direct (no jobs), two
 * populates at once, SIGINT to the CLI mid-run, and `docket progress` / `docket jobs --status
 * error`. The hazard rows of seed 000 these cover are named in each test ("hazard: ...").
 *
 * Without PostgreSQL the SQL tests are skipped with a message saying so, unless
 * DOCKET_REQUIRE_SQL=1 (set by .ci/run), where its absence is a failure.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import pg from 'pg';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { closeTestFile, connectTestClients, request, startTrackedNode, uniqueQueue } from '../support/docket.js';
import { REPO_ROOT, runDocket, type CliRun } from '../support/cli.js';

async function probe(): Promise<string | undefined> {
  const c = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test', connectionTimeoutMillis: 3000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return undefined;
  } catch (err) {
    return `PostgreSQL at 127.0.0.1:5432: ${(err as Error).message}`;
  } finally {
    await c.end().catch(() => undefined);
  }
}

const missing = await probe();
if (missing !== undefined && process.env.DOCKET_REQUIRE_SQL !== '1') {
  process.stderr.write(`populate tests on PostgreSQL skipped: ${missing} (set DOCKET_REQUIRE_SQL=1 to make this a failure)\n`);
}

test('PostgreSQL is reachable where it is required', () => {
  if (process.env.DOCKET_REQUIRE_SQL === '1') expect(missing).toBeUndefined();
  else expect(typeof (missing ?? '')).toBe('string');
});

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let dir: string;
/** The node's clock: moved past a stale timeout instead of waiting it out. */
const clock = new ManualClock(Date.now());

/**
 * The worker command: reads the key on stdin (checks DOCKET_KEY says the same), then inserts its
 * result row into the target table in one transaction. FAIL_SUBJECT: for that subject it inserts,
 * then fails before COMMIT (3,000 characters on stderr, exit 2), so the row is rolled back.
 */
const WORKER = `
import { createRequire } from 'node:module';
const require = createRequire(${JSON.stringify(join(REPO_ROOT, 'package.json'))});
const pg = require('pg');
let input = '';
for await (const chunk of process.stdin) input += chunk;
const key = JSON.parse(input);
if (JSON.stringify(JSON.parse(process.env.DOCKET_KEY)) !== JSON.stringify(key)) { process.stderr.write('DOCKET_KEY differs from stdin'); process.exit(3); }
const c = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' });
await c.connect();
await c.query('BEGIN');
await c.query('INSERT INTO ' + process.env.TARGET + ' (subject, session, result) VALUES ($1, $2, $3)', [key.subject, key.session, key.subject * 100 + key.session]);
if (String(key.subject) === process.env.FAIL_SUBJECT) {
  process.stderr.write('x'.repeat(3000) + ' make failed for subject ' + key.subject);
  process.exit(2);
}
await c.query('COMMIT');
await c.end();
`;

/**
 * A command for the --processes test (no database): notes how many commands are running as it
 * starts, and waits (at most 10 s) until three run at once or every key has started.
 */
const BARRIER = `
DIR="$1"; TOTAL="$2"; KEY=$(cat | tr -dc '0-9')
touch "$DIR/running-$KEY" "$DIR/started-$KEY"
ls "$DIR" | grep -c '^running-' >> "$DIR/observed"
i=0
while [ $i -lt 200 ]; do
  R=$(ls "$DIR" | grep -c '^running-'); S=$(ls "$DIR" | grep -c '^started-')
  if [ "$R" -ge 3 ] || [ "$S" -ge "$TOTAL" ]; then break; fi
  sleep 0.05; i=$((i+1))
done
ls "$DIR" | grep -c '^running-' >> "$DIR/observed"
rm -f "$DIR/running-$KEY"
`;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { clock, nodeName: 'populate' });
  ({ client, nc } = await connectTestClients(server, 'populate-test'));
  dir = await mkdtemp(join(tmpdir(), 'docket-populate-'));
  await writeFile(join(dir, 'worker.mjs'), WORKER);
  await writeFile(join(dir, 'barrier.sh'), BARRIER);
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
  await rm(dir, { recursive: true, force: true });
});

function ok(reply: Awaited<ReturnType<typeof request>>): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

interface Summary {
  ok: boolean;
  mode: string;
  computed: number;
  errors: number;
  skipped: number;
  interrupted: boolean;
  refreshed: { added: number; removed: number; orphaned: number; re_pended: number } | null;
  failures: { key: unknown; message: string }[];
}

function summaryOf(run: CliRun): Summary {
  try {
    return JSON.parse(run.stdout) as Summary;
  } catch {
    throw new Error(`populate printed no JSON summary (exit ${run.code}): ${run.stdout}\n${run.stderr}`);
  }
}

/** `docket populate <args> --json -- node worker.mjs` with the worker's environment. */
function populate(queue: string, args: readonly string[], env: Record<string, string>, options: Parameters<typeof runDocket>[2] = {}): Promise<CliRun> {
  const command = ['env', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), process.execPath, join(dir, 'worker.mjs')];
  return runDocket(server.url, ['populate', queue, '--json', ...args, '--', ...command], { deadlineMs: 60_000, ...options });
}

describe.skipIf(missing !== undefined)('docket populate on PostgreSQL', () => {
  const suffix = randomBytes(5).toString('hex');
  const upstream = `docket_pop_up_${suffix}`;
  const target = `docket_pop_done_${suffix}`;
  let pgc: pg.Client;

  beforeAll(async () => {
    pgc = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' });
    await pgc.connect();
    await pgc.query(`CREATE TABLE ${upstream} (subject int NOT NULL, session int NOT NULL, PRIMARY KEY (subject, session))`);
    await pgc.query(`CREATE TABLE ${target} (subject int NOT NULL, session int NOT NULL, result int NOT NULL, PRIMARY KEY (subject, session))`);
  });

  afterAll(async () => {
    await pgc?.query(`DROP TABLE IF EXISTS ${upstream}`);
    await pgc?.query(`DROP TABLE IF EXISTS ${target}`);
    await pgc?.end();
  });

  /** A job set over `subject IN (subjects)` of the upstream table, its target the target table's rows of those subjects. */
  async function jobSet(queue: string, subjects: readonly number[], extra: Record<string, unknown> = {}): Promise<void> {
    const values = subjects.flatMap((s) => [1, 2].map((session) => `(${s},${session})`)).join(',');
    await pgc.query(`INSERT INTO ${upstream} VALUES ${values}`);
    const within = `subject IN (${subjects.join(',')})`;
    ok(
      await request(nc, 'jobset.put', {
        queue,
        key_source: { url: 'postgres://postgres@127.0.0.1:5432/test', sql: `SELECT subject, session FROM ${upstream} WHERE ${within}` },
        target: { url: 'postgres://postgres@127.0.0.1:5432/test', sql: `SELECT subject, session FROM ${target} WHERE ${within}` },
        ...extra,
      }),
    );
  }

  async function targetRows(subjects: readonly number[]): Promise<string[]> {
    const { rows } = await pgc.query<{ subject: number; session: number; result: number }>(`SELECT subject, session, result FROM ${target} WHERE subject = ANY($1) ORDER BY subject, session`, [subjects]);
    return rows.map((r) => `${r.subject}/${r.session}=${r.result}`);
  }

  test('auto refresh, then every missing key computed into the target; a refresh afterwards adds nothing; progress shows remaining 0 (hazard: jobs table out of sync)', async () => {
    const queue = uniqueQueue('pop-all');
    await jobSet(queue, [10, 11, 12]);
    const run = await populate(queue, [], { TARGET: target });
    expect(run.code, run.stderr).toBe(0);
    const summary = summaryOf(run);
    expect(summary).toMatchObject({ ok: true, mode: 'distributed', computed: 6, errors: 0, skipped: 0, interrupted: false, refreshed: { added: 6, removed: 0 } });
    expect(await targetRows([10, 11, 12])).toEqual(['10/1=1001', '10/2=1002', '11/1=1101', '11/2=1102', '12/1=1201', '12/2=1202']);
    const again = await runDocket(server.url, ['refresh', queue, '--json']);
    expect(JSON.parse(again.stdout)).toMatchObject({ ok: true, added: 0, removed: 0, orphaned: 0, re_pended: 0 });
    const progress = await runDocket(server.url, ['progress', queue, '--json']);
    expect(JSON.parse(progress.stdout).jobset).toMatchObject({ pending: 0, reserved: 0, error: 0, total: 0, remaining: 0 });
    const text = await runDocket(server.url, ['progress', queue]);
    expect(text.stdout).toMatch(/remaining/);
  });

  test('--no-refresh takes only jobs already there; auto_refresh false in the job set is obeyed, --refresh overrides it', async () => {
    const queue = uniqueQueue('pop-norefresh');
    await jobSet(queue, [20, 21], { auto_refresh: false });
    const none = summaryOf(await populate(queue, [], { TARGET: target }));
    expect(none).toMatchObject({ computed: 0, refreshed: null });
    const forced = summaryOf(await populate(queue, ['--refresh', '--max-calls', '1'], { TARGET: target }));
    expect(forced).toMatchObject({ computed: 1, refreshed: { added: 4 } });
    const noRefresh = summaryOf(await populate(queue, ['--no-refresh'], { TARGET: target }));
    expect(noRefresh).toMatchObject({ computed: 3, refreshed: null });
    expect(await targetRows([20, 21])).toHaveLength(4);
  });

  test('--max-calls bounds the jobs run in all; --priority takes only jobs that urgent or more (hazard: priority confusion, lower is more urgent)', async () => {
    const queue = uniqueQueue('pop-limits');
    await jobSet(queue, [30, 31, 32]);
    // Subject 30 at priority 1, the rest at the default 5.
    expect(ok(await request(nc, 'refresh', { queue, restrict: { subject: 30 }, priority: 1 }))).toMatchObject({ added: 2 });
    expect(ok(await request(nc, 'refresh', { queue }))).toMatchObject({ added: 4 });
    const urgent = summaryOf(await populate(queue, ['--priority', '2'], { TARGET: target }));
    expect(urgent).toMatchObject({ computed: 2, errors: 0 });
    expect(await targetRows([30, 31, 32])).toEqual(['30/1=3001', '30/2=3002']);
    const two = summaryOf(await populate(queue, ['--max-calls', '2'], { TARGET: target }));
    expect(two).toMatchObject({ computed: 2 });
    expect(await targetRows([31, 32])).toHaveLength(2);
    const [progress] = await client.progress(queue);
    expect(progress?.pending).toBe(2);
  });

  test('a failing command: exit 1, the others computed, its row rolled back, and seed 000\'s error record; --suppress-errors exits 0 (hazards: partial make failure, error message truncation)', async () => {
    const queue = uniqueQueue('pop-fail');
    await jobSet(queue, [40, 41], { version: 'git' });
    const run = await populate(queue, [], { TARGET: target, FAIL_SUBJECT: '41' });
    expect(run.code).toBe(1);
    const summary = summaryOf(run);
    expect(summary).toMatchObject({ ok: false, computed: 2, errors: 2 });
    expect(summary.failures.map((f) => f.key)).toEqual(expect.arrayContaining([{ subject: 41, session: 1 }, { subject: 41, session: 2 }]));
    // The failed make's insert was rolled back with its transaction.
    expect(await targetRows([40, 41])).toEqual(['40/1=4001', '40/2=4002']);

    const errors = await runDocket(server.url, ['jobs', queue, '--status', 'error', '--json']);
    const { jobs } = JSON.parse(errors.stdout) as { jobs: { job_id: string; key: unknown; status: string; error_message: string }[] };
    expect(jobs.map((j) => j.status)).toEqual(['failed', 'failed']);
    expect(jobs[0]!.error_message).toHaveLength(2047);
    expect(jobs[0]!.error_message).toBe('x'.repeat(2047));
    const table = await runDocket(server.url, ['jobs', queue, '--status', 'error']);
    expect(table.stdout).toContain('"subject":41');
    expect(table.stdout).toContain('error_message');

    const detail = await client.get(jobs[0]!.job_id);
    const record = detail.run as Record<string, unknown>;
    const gitHead = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    expect((record['error'] as { message: string }).message).toHaveLength(2047);
    expect((record['error'] as { stack: string }).stack).toMatch(/^x{3000} make failed for subject 41$/);
    expect(record).toMatchObject({ user: userInfo().username, host: hostname(), version: gitHead, exit_code: 2 });
    expect(record['pid']).toEqual(expect.any(Number));
    expect(record['pid']).toBeGreaterThan(0);
    expect(record['connection_id']).toEqual(expect.any(Number));
    expect(record['duration_ms']).toEqual(expect.any(Number));

    // Reset the errors (seed 000: delete, then refresh adds them again) and populate again, suppressing errors.
    ok(await request(nc, 'delete', { queue, status: 'error' }));
    const suppressed = await populate(queue, ['--suppress-errors'], { TARGET: target, FAIL_SUBJECT: '41' });
    expect(suppressed.code).toBe(0);
    expect(summaryOf(suppressed)).toMatchObject({ ok: true, computed: 0, errors: 2, refreshed: { added: 2 } });
  });

  test('an ignored key is never run (hazard: ignore not respected); a stale job is gone before populate runs (hazard: stale job processed)', async () => {
    const queue = uniqueQueue('pop-ignore');
    await jobSet(queue, [50, 51], { stale_timeout_s: 60 });
    ok(await request(nc, 'refresh', { queue }));
    ok(await request(nc, 'ignore', { queue, key: { subject: 50, session: 1 } }));
    // Subject 51's upstream rows go: its jobs are stale once older than a minute.
    await pgc.query(`DELETE FROM ${upstream} WHERE subject = 51`);
    clock.advance(61_000);
    const summary = summaryOf(await populate(queue, [], { TARGET: target }));
    expect(summary).toMatchObject({ computed: 1, errors: 0, refreshed: { removed: 2 } });
    expect(await targetRows([50, 51])).toEqual(['50/2=5002']);
    const { jobs } = await client.list({ queue });
    expect(jobs.map((j) => [j.key, j.status])).toEqual([[{ subject: 50, session: 1 }, 'ignored']]);
  });

  test('--direct: keys are source - target read by the CLI, run one at a time, no job appended', async () => {
    const queue = uniqueQueue('pop-direct');
    await jobSet(queue, [60, 61]);
    await pgc.query(`INSERT INTO ${target} VALUES (60, 1, 0)`);
    const run = await populate(queue, ['--direct', '--restrict', '{"subject":60}'], { TARGET: target });
    expect(run.code, run.stderr).toBe(0);
    expect(summaryOf(run)).toMatchObject({ mode: 'direct', computed: 1, errors: 0, refreshed: null });
    const all = summaryOf(await populate(queue, ['--direct'], { TARGET: target }));
    expect(all).toMatchObject({ computed: 2 });
    expect(await targetRows([60, 61])).toEqual(['60/1=0', '60/2=6002', '61/1=6101', '61/2=6102']);
    const [progress] = await client.progress(queue);
    expect(progress?.total ?? 0).toBe(0);
    const refused = await runDocket(server.url, ['populate', queue, '--direct', '--processes', '2', '--', 'true']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/invalid_request.*--direct runs one process/);
  });

  test('two populates at once compute every key exactly once (hazards: simultaneous reservation, concurrent refresh calls, reserve during refresh)', async () => {
    const queue = uniqueQueue('pop-two');
    await jobSet(queue, [70, 71, 72, 73, 74]);
    const [a, b] = await Promise.all([populate(queue, ['--processes', '2'], { TARGET: target }), populate(queue, ['--processes', '2'], { TARGET: target })]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const [sa, sb] = [summaryOf(a), summaryOf(b)];
    expect(sa.errors + sb.errors).toBe(0);
    expect(sa.computed + sb.computed).toBe(10);
    // Each key's job was added once, however the two refreshes interleaved.
    expect(sa.refreshed!.added + sb.refreshed!.added).toBe(10);
    expect(await targetRows([70, 71, 72, 73, 74])).toHaveLength(10);
  });

  test('SIGINT mid-run: no more keys are taken, the running command ends and is recorded; exit 130', async () => {
    const queue = uniqueQueue('pop-sigint');
    await jobSet(queue, [80, 81]);
    const gate = join(dir, `gate-${queue}`);
    // The command says it started, then waits for the gate before it does its work.
    const command = ['sh', '-c', `cat > "${gate}.key"; touch "${gate}.started"; while [ ! -f "${gate}.open" ]; do sleep 0.05; done; exec env TARGET=${target} ${process.execPath} ${join(dir, 'worker.mjs')} < "${gate}.key"`];
    let stderr = '';
    const running = runDocket(server.url, ['populate', queue, '--json', '--', ...command], {
      deadlineMs: 60_000,
      onSpawn: (child) => {
        child.stderr!.on('data', (chunk: Buffer | string) => (stderr += chunk.toString()));
        void waitForFile(`${gate}.started`).then(() => child.kill('SIGINT'));
      },
    });
    // The CLI has taken the signal (it says so on stderr) before the command is let go.
    await waitFor(async () => stderr.includes('stopping: no more keys'));
    await writeFile(`${gate}.open`, '');
    const run = await running;
    expect(run.code, run.stderr).toBe(130);
    expect(summaryOf(run)).toMatchObject({ computed: 1, errors: 0, interrupted: true });
    expect(await targetRows([80, 81])).toHaveLength(1);
    const [progress] = await client.progress(queue);
    expect(progress).toMatchObject({ pending: 3, reserved: 0 });
  });
});

describe('docket populate without a database', () => {
  test('--processes 3 runs three commands at once and never more', async () => {
    const queue = uniqueQueue('pop-procs');
    const keys = [1, 2, 3, 4, 5, 6].map((n) => ({ n }));
    ok(await request(nc, 'jobset.put', { queue, key_source: { keys } }));
    const marks = await mkdtemp(join(dir, 'marks-'));
    const run = await runDocket(server.url, ['populate', queue, '--json', '--processes', '3', '--', 'sh', join(dir, 'barrier.sh'), marks, '6'], { deadlineMs: 60_000 });
    expect(run.code, run.stderr).toBe(0);
    expect(summaryOf(run)).toMatchObject({ computed: 6, errors: 0 });
    const observed = (await readFile(join(marks, 'observed'), 'utf8')).trim().split('\n').map(Number);
    expect(Math.max(...observed)).toBe(3);
    expect((await readdir(marks)).filter((f) => f.startsWith('started-'))).toHaveLength(6);
  });

  test('bad input: no command, a queue that is not a job set, a bad --priority; nothing runs', async () => {
    const queue = uniqueQueue('pop-bad');
    const noCommand = await runDocket(server.url, ['populate', queue]);
    expect(noCommand.code).toBe(1);
    const plain = await runDocket(server.url, ['populate', queue, '--', 'true']);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toMatch(/invalid_request.*is not a job set/);
    const priority = await runDocket(server.url, ['populate', queue, '--priority', '300', '--', 'true']);
    expect(priority.stderr).toMatch(/invalid_request.*--priority must be 0..255/);
  });
});

/** Resolves once `path` exists (polled: a file another process creates has no event to await here). */
async function waitForFile(path: string): Promise<void> {
  await waitFor(async () => existsSync(path));
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
