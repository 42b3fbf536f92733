/**
 * Job sets end to end (issue 14) through a real nats-server and the REAL PostgreSQL
 * (127.0.0.1:5432, user postgres, database test) and MariaDB (127.0.0.1:3306, root, database
 * test): `docket.cmd.jobset.put`, `docket.cmd.refresh` and `docket.cmd.jobset.show` against
 * uniquely named upstream and target tables (dropped afterwards). Refresh adds one keyed job per
 * key missing from the target, is idempotent, removes stale jobs after stale_timeout (on a
 * ManualClock), never re-adds or removes ignored keys, re-pends (keep_completed) and re-adds
 * orphans; keep_completed false removes a succeeded job from the views in its commit; a failing
 * source and bad input append nothing; a resend answers the first counts; the audit is clean.
 *
 * Without the databases the SQL tests are skipped with a message saying so, unless
 * DOCKET_REQUIRE_SQL=1 (set by .ci/run), where their absence is a failure.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, fail } from '../support/worker-helpers.js';
import { closeTestFile, connectTestClients, lastSeq, queueLog, request, startTrackedNode, uniqueQueue, type RawReply } from '../support/docket.js';
import { runDocket } from '../support/cli.js';

const PG_URL = 'postgres://postgres@127.0.0.1:5432/test';
const MY_URL = 'mysql://root@127.0.0.1:3306/test';

async function probe(): Promise<string | undefined> {
  const problems: string[] = [];
  const c = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test', connectionTimeoutMillis: 3000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
  } catch (err) {
    problems.push(`PostgreSQL at 127.0.0.1:5432: ${(err as Error).message}`);
  } finally {
    await c.end().catch(() => undefined);
  }
  try {
    const m = await mysql.createConnection({ host: '127.0.0.1', port: 3306, user: 'root', database: 'test', connectTimeout: 3000 });
    await m.end();
  } catch (err) {
    problems.push(`MariaDB at 127.0.0.1:3306: ${(err as Error).message}`);
  }
  return problems.length === 0 ? undefined : problems.join('; ');
}

const missing = await probe();
if (missing !== undefined && process.env.DOCKET_REQUIRE_SQL !== '1') {
  process.stderr.write(`job set refresh tests on SQL skipped: ${missing} (set DOCKET_REQUIRE_SQL=1 to make this a failure)\n`);
}

test('the databases are reachable where they are required', () => {
  if (process.env.DOCKET_REQUIRE_SQL === '1') expect(missing).toBeUndefined();
  else expect(typeof (missing ?? '')).toBe('string');
});

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-06-01T08:00:00.000Z'));

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { clock, nodeName: 'jobsets' });
  ({ client, nc, jsm } = await connectTestClients(server, 'jobsets-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

function ok(reply: RawReply): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

function refused(reply: RawReply): { code: string; message: string } {
  if (reply.ok) throw new Error(`expected a refusal, got ${JSON.stringify(reply)}`);
  return reply.error;
}

async function refresh(queue: string, extra: Record<string, unknown> = {}) {
  const { queue: _q, replayed: _r, ok: _ok, ...counts } = ok(await request(nc, 'refresh', { queue, ...extra }));
  return counts;
}

/** The keys of the queue's jobs in the views, by status, sorted. */
async function keysByStatus(queue: string): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  const { jobs } = await client.list({ queue, limit: 1000 });
  for (const job of jobs) (out[job.status] ??= []).push(JSON.stringify(job.key));
  for (const list of Object.values(out)) list.sort();
  return out;
}

async function auditQueue(queue: string) {
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog, logFilter } = await import('../../src/store/read-log.js');
  const messages = [];
  for await (const m of readLog(nc, { filter: logFilter(queue) })) messages.push(m);
  return auditMessages(messages);
}


const k = (subject: number, session: number) => JSON.stringify({ subject, session });

describe('bad input appends nothing', () => {
  test('refresh of a queue that is not a job set, a bad restrict, a password in the URL, an unknown source form', async () => {
    const queue = uniqueQueue('plain');
    await client.submit({ queue, params: {} });
    const before = await lastSeq(jsm);
    const notJobSet = refused(await request(nc, 'refresh', { queue }));
    expect(notJobSet.code).toBe('invalid_request');
    expect(notJobSet.message).toContain(`queue ${queue} is not a job set`);
    expect(refused(await request(nc, 'refresh', { queue, restrict: 'subject = 1' })).code).toBe('invalid_request');
    const password = refused(await request(nc, 'jobset.put', { queue, key_source: { url: 'postgres://lab:secret@127.0.0.1/test', sql: 'SELECT 1 AS a' } }));
    expect(password).toMatchObject({ code: 'invalid_request' });
    expect(password.message).toMatch(/must not hold a password/);
    expect(refused(await request(nc, 'jobset.put', { queue, key_source: { table: 'x' } })).code).toBe('invalid_request');
    expect(refused(await request(nc, 'jobset.show', { queue })).message).toContain('is not a job set');
    expect(await lastSeq(jsm)).toBe(before);
  });

  test('a failing source (a command that exits 3) is invalid_request naming it, and appends nothing', async () => {
    const queue = uniqueQueue('failing');
    ok(await request(nc, 'jobset.put', { queue, key_source: { command: ['sh', '-c', 'echo \'{"a":1}\'; echo broken >&2; exit 3'] } }));
    const before = await lastSeq(jsm);
    const error = refused(await request(nc, 'refresh', { queue }));
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(/key source .*sh.*exited with code 3.*broken/s);
    expect(await lastSeq(jsm)).toBe(before);
    const show = await client.showJobSet(queue);
    expect(show.remaining).toBeNull();
    expect(show.remaining_error).toMatch(/exited with code 3/);
  });
});

describe.skipIf(missing !== undefined)('job sets on PostgreSQL and MariaDB', () => {
  const suffix = randomBytes(5).toString('hex');
  const upstream = `docket_up_${suffix}`;
  const target = `docket_done_${suffix}`;
  let pgc: pg.Client;
  let my: mysql.Connection;

  beforeAll(async () => {
    pgc = new pg.Client({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' });
    await pgc.connect();
    my = await mysql.createConnection({ host: '127.0.0.1', port: 3306, user: 'root', database: 'test' });
    for (const run of [(sql: string) => pgc.query(sql), (sql: string) => my.query(sql)]) {
      await run(`CREATE TABLE ${upstream} (subject int NOT NULL, session int NOT NULL, PRIMARY KEY (subject, session))`);
      await run(`CREATE TABLE ${target} (subject int NOT NULL, session int NOT NULL, method varchar(20) NOT NULL, PRIMARY KEY (subject, session, method))`);
    }
  });

  afterAll(async () => {
    for (const run of [(sql: string) => pgc?.query(sql), (sql: string) => my?.query(sql)]) {
      await run(`DROP TABLE IF EXISTS ${upstream}`);
      await run(`DROP TABLE IF EXISTS ${target}`);
    }
    await pgc?.end();
    await my?.end();
  });

  test('PostgreSQL: adds the missing keys once, is idempotent, removes stale jobs after stale_timeout, never touches ignored keys; keep_completed false removes succeeded jobs; a resend answers the first counts; the audit is clean', async () => {
    const queue = uniqueQueue('pg-set');
    await pgc.query(`INSERT INTO ${upstream} VALUES (1,1),(1,2),(2,1),(2,2),(3,1)`);
    // (1,1) is computed already; its extra target attribute (method) does not matter.
    await pgc.query(`INSERT INTO ${target} VALUES (1,1,'a')`);
    const put = await client.putJobSet({
      queue,
      key_source: { url: PG_URL, sql: `SELECT subject, session FROM ${upstream} ORDER BY subject, session` },
      target: { url: PG_URL, sql: `SELECT subject, session, method FROM ${target}` },
      stale_timeout_s: 60,
    });
    expect(put.jobset).toEqual({ key_source: { url: PG_URL, sql: `SELECT subject, session FROM ${upstream} ORDER BY subject, session` }, target: { url: PG_URL, sql: `SELECT subject, session, method FROM ${target}` }, stale_timeout_s: 60 });

    expect(await refresh(queue)).toEqual({ added: 4, removed: 0, orphaned: 0, re_pended: 0 });
    expect(await keysByStatus(queue)).toEqual({ queued: [k(1, 2), k(2, 1), k(2, 2), k(3, 1)].sort() });
    // Idempotent: a second refresh adds nothing and appends only its own record.
    const seq = await lastSeq(jsm);
    expect(await refresh(queue)).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 0 });
    expect(await lastSeq(jsm)).toBe(seq + 1);
    let show = await client.showJobSet(queue);
    expect(show.progress).toMatchObject({ pending: 4, reserved: 0, success: 0, error: 0, ignore: 0, total: 4 });
    expect(show.remaining).toBe(4);
    expect(show.last_refresh?.counts).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 0 });

    // keep_completed false (the default): the succeeded job leaves the views in its own commit.
    const [job] = await claim(nc, queue, { max: 1 });
    // The first in source order (ORDER BY): the worker writes its target row, then completes.
    expect(job!.key).toEqual({ subject: 1, session: 2 });
    await pgc.query(`INSERT INTO ${target} VALUES (1,2,'a')`);
    expect(await complete(nc, queue, job!)).toMatchObject({ ok: true, status: 'removed' });
    const log = await queueLog(nc, queue);
    const succeeded = log.find((e) => e.type === 'job.succeeded' && e.jobId === job!.job_id)!;
    const removed = log.find((e) => e.type === 'job.removed' && e.jobId === job!.job_id)!;
    expect(removed.data).toEqual({ reason: 'completed' });
    expect(removed.seq).toBe(succeeded.seq);
    expect((await client.get(job!.job_id)).job.status).toBe('removed');
    show = await client.showJobSet(queue);
    expect(show.progress).toMatchObject({ pending: 3, success: 0, total: 3, removed: 1 });
    expect(show.remaining).toBe(3);
    // Its row is in the target: not added again.
    expect((await refresh(queue)).added).toBe(0);

    // Ignore (2,1); then (2,1) and (2,2) leave the source.
    const jobs = (await client.list({ queue, limit: 100 })).jobs;
    const jobOf = (subject: number, session: number) => jobs.find((j) => JSON.stringify(j.key) === k(subject, session))!.job_id;
    expect(await client.ignore({ queue, key: { subject: 2, session: 1 } })).toEqual({ queue, job_id: jobOf(2, 1), status: 'ignored', created: true });
    await pgc.query(`DELETE FROM ${upstream} WHERE subject = 2`);
    // Not older than stale_timeout yet: nothing removed.
    expect(await refresh(queue)).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 0 });
    clock.advance(61_000);
    expect(await refresh(queue)).toEqual({ added: 0, removed: 1, orphaned: 0, re_pended: 0 });
    expect(await keysByStatus(queue)).toEqual({ ignored: [k(2, 1)], queued: [k(3, 1)] });
    expect((await client.get(jobOf(2, 2))).job.status).toBe('removed');
    // The ignored key is in the source again: it holds its job, so it is not added.
    await pgc.query(`INSERT INTO ${upstream} VALUES (2,1)`);
    expect((await refresh(queue)).added).toBe(0);

    // With a command id: the resend answers the first counts and appends nothing.
    await pgc.query(`INSERT INTO ${upstream} VALUES (4,1)`);
    const first = ok(await request(nc, 'refresh', { id: `r-${suffix}`, queue }));
    expect(first).toMatchObject({ added: 1, replayed: false });
    const after = await lastSeq(jsm);
    expect(ok(await request(nc, 'refresh', { id: `r-${suffix}`, queue }))).toMatchObject({ added: 1, removed: 0, replayed: true });
    expect(await lastSeq(jsm)).toBe(after);
    expect(refused(await request(nc, 'refresh', { id: `r-${suffix}`, queue, priority: 1 })).code).toBe('conflict');
    // Keyed job ids: a key submitted by hand names the refresh's job.
    const byHand = await client.submit({ queue, key: { subject: 4, session: 1 } });
    expect(byHand).toMatchObject({ created: false });

    const report = await auditQueue(queue);
    expect(report.violations).toEqual([]);
  });

  test('password_env unset on the node: the refresh is invalid_request naming the variable and appends nothing; a paused queue takes a put and a refresh', async () => {
    const queue = uniqueQueue('pw-set');
    ok(await request(nc, 'pause', { queue, create: true }));
    const variable = `DOCKET_TEST_UNSET_${suffix.toUpperCase()}`;
    ok(await request(nc, 'jobset.put', { queue, key_source: { url: PG_URL, sql: `SELECT subject, session FROM ${upstream}`, password_env: variable } }));
    const before = await lastSeq(jsm);
    const error = refused(await request(nc, 'refresh', { queue }));
    expect(error.code).toBe('invalid_request');
    expect(error.message).toContain(variable);
    expect(await lastSeq(jsm)).toBe(before);
    ok(await request(nc, 'jobset.put', { queue, key_source: { keys: [{ subject: 1, session: 1 }] } }));
    expect(await refresh(queue)).toEqual({ added: 1, removed: 0, orphaned: 0, re_pended: 0 });
    expect(await claim(nc, queue, { max: 1 })).toEqual([]);
    expect(await auditQueue(queue)).toMatchObject({ violations: [] });
  });

  test('MariaDB: keep_completed keeps success and re-pends a key whose target row is missing; restrict narrows adds; orphans are removed and added again', async () => {
    const queue = uniqueQueue('my-set');
    await my.query(`INSERT INTO ${upstream} VALUES (10,1),(10,2),(11,1)`);
    ok(
      await request(nc, 'jobset.put', {
        queue,
        key_source: { url: MY_URL, sql: `SELECT subject, session FROM ${upstream} WHERE subject >= 10` },
        target: { url: MY_URL, sql: `SELECT subject, session FROM ${target}` },
        keep_completed: true,
        default_priority: 3,
      }),
    );
    // restrict narrows what is added.
    expect(await refresh(queue, { restrict: { subject: 10 } })).toEqual({ added: 2, removed: 0, orphaned: 0, re_pended: 0 });
    expect(await refresh(queue)).toEqual({ added: 1, removed: 0, orphaned: 0, re_pended: 0 });
    const listed = (await client.list({ queue, limit: 10 })).jobs;
    expect(listed.map((j) => j.priority)).toEqual([3, 3, 3]);

    // keep_completed: the success stays; its key has no target row, so a refresh re-pends it.
    const [done] = await claim(nc, queue, { max: 1 });
    expect(await complete(nc, queue, done!)).toMatchObject({ ok: true, status: 'succeeded' });
    expect((await client.showJobSet(queue)).progress).toMatchObject({ success: 1, pending: 2 });
    expect(await refresh(queue)).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 1 });
    expect((await client.get(done!.job_id)).job.status).toBe('removed');
    expect((await client.showJobSet(queue)).progress).toMatchObject({ success: 0, pending: 3 });

    // An orphan: claimed, its worker gone; a refresh with orphan_timeout_s cancels and removes it
    // and adds its key again (in one commit).
    const [orphan] = await claim(nc, queue, { max: 1, lease_ms: 3_600_000 });
    expect(await refresh(queue, { orphan_timeout_s: 30 })).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 0 });
    clock.advance(31_000);
    expect(await refresh(queue, { orphan_timeout_s: 30 })).toEqual({ added: 0, removed: 0, orphaned: 1, re_pended: 0 });
    const log = await queueLog(nc, queue);
    const ofOrphan = log.filter((e) => e.jobId === orphan!.job_id && (e.type === 'job.cancelled' || e.type === 'job.removed'));
    expect(ofOrphan.map((e) => [e.type, e.data['reason']])).toEqual([
      ['job.cancelled', 'orphan'],
      ['job.removed', 'orphan'],
    ]);
    const readded = log.find((e) => e.type === 'job.submitted' && e.seq === ofOrphan[0]!.seq)!;
    expect(readded.data['key']).toEqual(orphan!.key);
    expect((await client.showJobSet(queue)).progress).toMatchObject({ pending: 3, reserved: 0 });
    // The orphan's worker comes back: its run is gone.
    expect(await complete(nc, queue, orphan!)).toMatchObject({ ok: false });

    const report = await auditQueue(queue);
    expect(report.violations).toEqual([]);
  });
});

/** The CLI as a user runs it (no terminal), against this file's server. */
const docket = (args: string[]) => runDocket(server.url, args);

describe('CLI: docket jobset put|show, docket refresh', () => {
  test('a file key source and a command target: put, refresh (--restrict, then all), show with remaining; errors exit 1 naming the problem', async () => {
    const queue = uniqueQueue('cli-set');
    const dir = await mkdtemp(join(tmpdir(), 'docket-jobset-'));
    try {
      const keys = join(dir, 'keys.jsonl');
      await writeFile(keys, ['{"lab":"a","n":1}', '{"lab":"a","n":2}', '{"lab":"b","n":3}', ''].join('\n'));
      const put = await docket(['jobset', 'put', queue, '--source-file', keys, '--target-command', JSON.stringify(['sh', '-c', 'echo \'{"lab":"a","n":2,"extra":true}\'']), '--stale-timeout', '10m', '--json']);
      expect(put.stderr).toBe('');
      expect(put.code).toBe(0);
      expect(JSON.parse(put.stdout)).toMatchObject({ ok: true, queue, jobset: { key_source: { file: keys }, target: { command: ['sh', '-c', expect.any(String)] }, stale_timeout_s: 600 } });

      const restricted = await docket(['refresh', queue, '--restrict', '{"lab":"b"}', '--json']);
      expect(JSON.parse(restricted.stdout)).toEqual({ ok: true, queue, added: 1, removed: 0, orphaned: 0, re_pended: 0, replayed: false });
      const all = await docket(['refresh', queue]);
      expect(all.code).toBe(0);
      expect(all.stdout.trim()).toBe(`refreshed ${queue}: added 1, removed 0, orphaned 0, re-pended 0`);

      const shown = await docket(['jobset', 'show', queue, '--json']);
      expect(JSON.parse(shown.stdout)).toMatchObject({ ok: true, queue, progress: { pending: 2, reserved: 0, success: 0, error: 0, ignore: 0, total: 2 }, remaining: 2, last_refresh: { counts: { added: 1 } } });
      const table = await docket(['jobset', 'show', queue]);
      expect(table.stdout).toMatch(/remaining\s*│\s*2/);
      expect(table.stdout).toContain(`file ${keys}`);

      const noSource = await docket(['jobset', 'put', queue]);
      expect(noSource.code).toBe(1);
      expect(noSource.stderr).toMatch(/give the key source/);
      const password = await docket(['jobset', 'put', queue, '--source-sql', 'SELECT 1 AS a', '--url', 'postgres://u:secret@127.0.0.1/test']);
      expect(password.code).toBe(1);
      expect(password.stderr).toMatch(/must not hold a password/);
      const plain = await docket(['refresh', uniqueQueue('cli-none'), '--json']);
      expect(plain.code).toBe(1);
      expect(JSON.parse(plain.stdout)).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('ignore and delete', () => {
  test('ignore: a pending job, a key with no job (refresh never adds it), an error job (replaced in one commit); delete: by status resets errors for the next refresh, by key frees an ignored key, never a running job; bad input appends nothing', async () => {
    const queue = uniqueQueue('ignore-set');
    const keys = [1, 2, 3, 4, 5].map((n) => ({ n }));
    ok(await request(nc, 'jobset.put', { queue, key_source: { keys } }));
    expect(await refresh(queue)).toMatchObject({ added: 5 });
    const idOf = async (n: number) => (await client.list({ queue, limit: 100 })).jobs.find((j) => JSON.stringify(j.key) === JSON.stringify({ n }))!.job_id;

    // A key with no job yet: created ignored in one commit, so a refresh never adds it.
    ok(await request(nc, 'jobset.put', { queue, key_source: { keys: [...keys, { n: 6 }] } }));
    const six = await client.ignore({ queue, key: { n: 6 }, reason: 'bad session' });
    expect(six).toMatchObject({ status: 'ignored', created: true });
    expect((await client.get(six.job_id)).job).toMatchObject({ status: 'ignored', key: { n: 6 }, end_reason: 'bad session' });
    expect(await refresh(queue)).toMatchObject({ added: 0 });
    // Again: answered as it is, nothing appended.
    let seq = await lastSeq(jsm);
    expect(await client.ignore({ queue, key: { n: 6 } })).toEqual({ queue, job_id: six.job_id, status: 'ignored', created: false });
    expect(await lastSeq(jsm)).toBe(seq);

    // A pending job is ignored in place and never handed out.
    const one = await idOf(1);
    expect(await client.ignore({ queue, key: { n: 1 } })).toMatchObject({ job_id: one, created: true });

    // Run 2 (fails) and 3 (running); 4 and 5 stay pending.
    const claimed = await claim(nc, queue, { max: 2 });
    expect(claimed.map((j) => j.key)).toEqual([{ n: 2 }, { n: 3 }]);
    expect((await fail(nc, queue, claimed[0]!)).ok).toBe(true);
    // An error job's key: ignoring it removes the error job and ignores a new one, one commit.
    const two = await client.ignore({ queue, key: { n: 2 } });
    expect(two.job_id).not.toBe(claimed[0]!.job_id);
    expect((await client.get(claimed[0]!.job_id)).job.status).toBe('removed');
    // A running job cannot be ignored.
    expect(refused(await request(nc, 'ignore', { queue, key: { n: 3 } }))).toMatchObject({ code: 'invalid_transition' });
    // Nor deleted: a delete leaves it, saying so.
    expect(await client.deleteJobs({ queue, key: { n: 3 } })).toEqual({ queue, deleted: 0, running: 1, replayed: false });

    // Delete by status: the pending jobs go; a refresh adds them again.
    const deleted = ok(await request(nc, 'delete', { id: `del-${queue}`, queue, status: 'pending' }));
    expect(deleted).toMatchObject({ deleted: 2, running: 0, replayed: false });
    seq = await lastSeq(jsm);
    expect(ok(await request(nc, 'delete', { id: `del-${queue}`, queue, status: 'pending' }))).toMatchObject({ deleted: 2, replayed: true });
    expect(await lastSeq(jsm)).toBe(seq);
    expect(await refresh(queue)).toMatchObject({ added: 2 });
    // Delete by key frees an ignored key: the next refresh adds it.
    expect(await client.deleteJobs({ queue, key: { n: 6 } })).toMatchObject({ deleted: 1 });
    expect(await refresh(queue)).toMatchObject({ added: 1 });
    expect((await client.showJobSet(queue)).progress).toMatchObject({ pending: 3, reserved: 1, ignore: 2, error: 0 });

    seq = await lastSeq(jsm);
    expect(refused(await request(nc, 'delete', { queue })).message).toMatch(/give key, status or restrict/);
    expect(refused(await request(nc, 'delete', { queue, status: 'reserved' })).code).toBe('invalid_request');
    expect(refused(await request(nc, 'ignore', { queue, key: {} })).code).toBe('invalid_request');
    expect(refused(await request(nc, 'ignore', { queue: uniqueQueue('not-a-set'), key: { n: 1 } })).message).toContain('is not a job set');
    expect(await lastSeq(jsm)).toBe(seq);

    const cli = await docket(['jobset', 'delete', queue, '--restrict', '[{"n":4},{"n":5}]', '--json']);
    expect(JSON.parse(cli.stdout)).toMatchObject({ ok: true, deleted: 2 });
    const cliIgnore = await docket(['jobset', 'ignore', queue, '{"n":4}']);
    expect(cliIgnore.stdout).toMatch(/is ignored/);
    expect(await auditQueue(queue)).toMatchObject({ violations: [] });
  });
});

describe('after a restart', () => {
  test('a node folded from the log knows the job set, its last refresh and a resend of it; a refresh adds nothing again', async () => {
    const queue = uniqueQueue('restart-set');
    ok(await request(nc, 'jobset.put', { queue, key_source: { keys: [{ n: 1 }, { n: 2 }] }, keep_completed: true }));
    expect(ok(await request(nc, 'refresh', { id: `restart-${queue}`, queue }))).toMatchObject({ added: 2, replayed: false });
    await node.close();
    node = await startTrackedNode(server, { clock, nodeName: 'jobsets-again' });
    const show = await client.showJobSet(queue);
    expect(show.jobset).toEqual({ key_source: { keys: [{ n: 1 }, { n: 2 }] }, keep_completed: true });
    expect(show.last_refresh?.counts).toEqual({ added: 2, removed: 0, orphaned: 0, re_pended: 0 });
    expect(show).toMatchObject({ progress: { pending: 2 }, remaining: 2 });
    const seq = await lastSeq(jsm);
    expect(ok(await request(nc, 'refresh', { id: `restart-${queue}`, queue }))).toMatchObject({ added: 2, replayed: true });
    expect(await lastSeq(jsm)).toBe(seq);
    expect(await refresh(queue)).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 0 });
    expect(await auditQueue(queue)).toMatchObject({ violations: [] });
  });
});
