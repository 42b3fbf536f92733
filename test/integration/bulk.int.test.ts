/**
 * Bulk actions (issue 17) through NATS against a real nats-server: `docket.cmd.retry_all`,
 * `cancel_all` and `clean`, their counts and dry runs, the views after (progress, list, queue
 * order, key index, get), a resend with the same command id (the first result, nothing appended),
 * bad input (invalid_request, nothing appended), a 5,000-job cancel_all in a few commits, a
 * replay and a checkpoint after clean giving the same projections, and the CLI verbs.
 *
 * One server and one node for the file, on a ManualClock; each test takes its own queue.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ManualClock, toIso } from '../../src/clock.js';
import { envelope, transitionJob } from '../../src/commands/handle-command.js';
import { DocketError } from '../../src/errors.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, fail, untilRetryOf } from '../support/worker-helpers.js';
import {
  captureProjections,
  caughtUp,
  closeTestFile,
  connectTestClients,
  countEvents,
  openResources,
  queueLog,
  request,
  startTrackedNode,
  streamMessages,
  uniqueQueue,
  type RawReply,
} from '../support/docket.js';
import { runDocket } from '../support/cli.js';


let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-06-01T08:00:00.000Z'));
const dirs: string[] = [];

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { clock, nodeName: 'bulk' });
  ({ client, nc, jsm } = await connectTestClients(server, 'bulk-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

afterEach(() => {
  expect(openResources()).toHaveLength(1);
});

interface BulkOk {
  readonly count: number;
  readonly job_ids: string[];
  readonly truncated?: true;
  readonly dry_run?: true;
}

/** A bulk command that must succeed. */
async function bulk(verb: 'retry_all' | 'cancel_all' | 'clean', body: Record<string, unknown>): Promise<BulkOk> {
  const reply = await request(nc, verb, body);
  if (!reply.ok) throw new Error(`${verb} refused: ${reply.error.code}: ${reply.error.message}`);
  const { ok: _ok, ...fields } = reply;
  return fields as unknown as BulkOk;
}

async function submit(queue: string, spec: Record<string, unknown> = {}): Promise<string> {
  return (await client.submit({ queue, ...spec } as Parameters<Client['submit']>[0])).job_id;
}

async function submitMany(queue: string, n: number, spec: Record<string, unknown> = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < n; start += 10_000) {
    const { jobs } = await client.submitBatch(Array.from({ length: Math.min(10_000, n - start) }, (_, i) => ({ queue, params: { i: start + i }, ...spec })));
    for (const job of jobs) {
      if (!job.ok) throw new Error(`submit refused: ${job.error.message}`);
      ids.push(job.job_id);
    }
  }
  return ids;
}

/** Claims `n` jobs of the queue and ends each: `fail` or `succeed`. Returns their ids in claim order. */
async function runJobs(queue: string, n: number, end: 'fail' | 'succeed'): Promise<string[]> {
  const jobs = await claim(nc, queue, { max: n });
  expect(jobs).toHaveLength(n);
  for (const job of jobs) {
    const reply = end === 'fail' ? await fail(nc, queue, job) : await complete(nc, queue, job);
    expect(reply.ok).toBe(true);
  }
  return jobs.map((j) => j.job_id);
}

async function progressOf(queue: string) {
  const [progress] = await client.progress(queue);
  return progress!;
}

async function listIds(queue: string, status?: string): Promise<string[]> {
  const ids: string[] = [];
  for (let cursor: string | null | undefined; ; ) {
    const page = await client.list({ queue, limit: 1000, ...(status === undefined ? {} : { status }), ...(cursor ? { cursor } : {}) });
    ids.push(...page.jobs.map((j) => j.job_id));
    if (page.next_cursor === null) return ids;
    cursor = page.next_cursor;
  }
}

describe('retry_all', () => {
  test('retries every failed job whose chain has no retry (as `retry` does: due now, the chain extended), once; since filters on the failure time', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    // Two jobs fail for good (one attempt each), one succeeds, one fails with attempts left (the
    // retrier makes its retry: its chain has one, so retry_all leaves it).
    await submitMany(queue, 3, { max_attempts: 1 });
    const [failedA, failedB] = await runJobs(queue, 2, 'fail');
    await runJobs(queue, 1, 'succeed');
    await submit(queue, { max_attempts: 2 });
    const [withRetry] = await runJobs(queue, 1, 'fail');
    const autoRetry = await untilRetryOf(node, withRetry!);
    clock.advance(60_000);
    // Ahead of the automatic retry (due by now) in the queue order.
    const later = await submit(queue, { max_attempts: 1, priority: 0 });
    await runJobs(queue, 1, 'fail');

    const before = await countEvents(nc, queue, 'job.submitted');
    const dry = await bulk('retry_all', { queue, dry_run: true });
    expect(dry).toMatchObject({ count: 3, dry_run: true });
    const since = await bulk('retry_all', { queue, since: toIso(clock.now() - 1), dry_run: true });
    expect(since).toMatchObject({ count: 1 });
    expect(await countEvents(nc, queue, 'job.submitted')).toBe(before);

    const reply = await bulk('retry_all', { queue, id: `ra-${queue}` });
    expect(reply.count).toBe(3);
    expect(reply.dry_run).toBeUndefined();
    expect(await countEvents(nc, queue, 'job.submitted')).toBe(before + 3);
    const retries = await Promise.all(reply.job_ids.map((id) => client.get(id)));
    expect(retries.map((r) => r.job.retry_of).sort()).toEqual([failedA, failedB, later].sort());
    for (const r of retries) {
      expect(r.job).toMatchObject({ status: 'queued', attempt: 2, max_attempts: 2, run_at: toIso(clock.now()) });
    }
    expect(reply.job_ids).not.toContain(autoRetry.jobId);

    // The same id again: the first result, nothing appended. Without an id: nothing left to retry.
    expect(await bulk('retry_all', { queue, id: `ra-${queue}` })).toEqual(reply);
    expect(await bulk('retry_all', { queue })).toMatchObject({ count: 0, job_ids: [] });
    expect(await countEvents(nc, queue, 'job.submitted')).toBe(before + 3);
    // The same id with another body is a conflict.
    const reused = await request(nc, 'retry_all', { queue, id: `ra-${queue}`, since: toIso(clock.now()) });
    expect(reused).toMatchObject({ ok: false, error: { code: 'conflict' } });
  });
});

describe('cancel_all', () => {
  test('status delayed cancels the delayed jobs only; queued cancels every queued job; the views drop them', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ready = await submitMany(queue, 4);
    const delayed = await submitMany(queue, 3, { delay_ms: 3_600_000 });
    const [running] = await claim(nc, queue, { max: 1 });
    expect(ready).toContain(running!.job_id);

    const eventsBefore = await countEvents(nc, queue, 'job.cancelled');
    expect(await bulk('cancel_all', { queue, status: 'waiting' })).toMatchObject({ count: 0, job_ids: [] });
    expect(await bulk('cancel_all', { queue, status: 'delayed', dry_run: true })).toMatchObject({ count: 3, dry_run: true });
    expect(await countEvents(nc, queue, 'job.cancelled')).toBe(eventsBefore);

    const onlyDelayed = await bulk('cancel_all', { queue, status: 'delayed' });
    expect(onlyDelayed).toEqual({ count: 3, job_ids: delayed });
    expect(await progressOf(queue)).toMatchObject({ pending: 3, delayed: 0, reserved: 1, cancelled: 3 });

    const rest = await bulk('cancel_all', { queue, status: 'queued', reason: 'maintenance' });
    expect(rest.job_ids).toEqual(ready.filter((id) => id !== running!.job_id));
    expect(await progressOf(queue)).toMatchObject({ pending: 0, reserved: 1, cancelled: 6, total: 7 });
    expect(await listIds(queue, 'queued')).toEqual([]);
    expect(node.queueOrder.snapshot(queue)).toEqual({ ready: [], delayed: [] });
    expect((await client.get(rest.job_ids[0]!)).job).toMatchObject({ status: 'cancelled', end_reason: 'maintenance' });
    // The running job was left alone (cancel_all takes no running job).
    expect((await client.get(running!.job_id)).job.status).toBe('running');
    expect(await countEvents(nc, queue, 'job.cancelled')).toBe(eventsBefore + 6);
  });

  test('5,000 queued jobs are cancelled by one command in a few commits', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submitMany(queue, 5_000);
    const reply = await bulk('cancel_all', { queue, status: 'queued' });
    expect(reply.count).toBe(5_000);
    expect(reply.job_ids).toEqual(ids);
    expect(reply.truncated).toBeUndefined();
    const cancels = (await queueLog(nc, queue)).filter((e) => e.type === 'job.cancelled');
    expect(cancels).toHaveLength(5_000);
    // A commit holds at most 4,096 events and 900 KiB: two commits, three at most.
    const commits = new Set(cancels.map((e) => e.seq));
    expect(commits.size).toBeGreaterThanOrEqual(2);
    expect(commits.size).toBeLessThanOrEqual(3);
    expect(await progressOf(queue)).toMatchObject({ pending: 0, cancelled: 5_000, total: 5_000 });
  });

  test('a resend with the same id answers the first result and appends nothing, also after new jobs came', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submitMany(queue, 5);
    const id = `ca-${queue}`;
    const reply = await bulk('cancel_all', { queue, status: 'queued', id });
    expect(reply).toEqual({ count: 5, job_ids: first });
    await submitMany(queue, 2);
    const messages = await streamMessages(jsm);
    expect(await bulk('cancel_all', { queue, status: 'queued', id })).toEqual(reply);
    expect(await streamMessages(jsm)).toBe(messages);
    // Through the SDK the same.
    expect(await client.cancelAll({ queue, status: 'queued', id })).toEqual(reply);
    expect(await client.cancelAll({ queue, status: 'queued', dry_run: true })).toMatchObject({ count: 2, dry_run: true });
    expect(await streamMessages(jsm)).toBe(messages);
    // Each event's id is derived from the command id and its job (a resend finds its own).
    const cancels = (await queueLog(nc, queue)).filter((e) => e.type === 'job.cancelled');
    expect(new Set(cancels.map((e) => e.id)).size).toBe(5);
    expect(await progressOf(queue)).toMatchObject({ pending: 2, cancelled: 5 });
  });
});

describe('a resend after a restart', () => {
  test('a new node (the log folded again) answers a resent clean and retry_all with the first result and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submitMany(queue, 4, { max_attempts: 1 });
    await runJobs(queue, 2, 'succeed');
    await runJobs(queue, 2, 'fail');
    const cleaned = await bulk('clean', { queue, status: 'succeeded', older_than_ms: 0, id: `cl-${queue}` });
    const retried = await bulk('retry_all', { queue, id: `ra-${queue}` });
    expect(cleaned.count).toBe(2);
    expect(retried.count).toBe(2);

    await node.close();
    node = await startTrackedNode(server, { clock, nodeName: 'bulk-again' });
    const messages = await streamMessages(jsm);
    expect(await bulk('clean', { queue, status: 'succeeded', older_than_ms: 0, id: `cl-${queue}` })).toEqual(cleaned);
    expect(await bulk('retry_all', { queue, id: `ra-${queue}` })).toEqual(retried);
    expect(await streamMessages(jsm)).toBe(messages);
    // A reused id on another verb is refused.
    expect(await request(nc, 'cancel_all', { queue, status: 'queued', id: `ra-${queue}` })).toMatchObject({ ok: false, error: { code: 'conflict' } });
  });
});

describe('clean', () => {
  test('removes ended jobs older than the cut from every view; get and explain still show them, removed; the key is free', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const keyed = await submit(queue, { key: 'user-7' });
    await submitMany(queue, 2);
    const done = await runJobs(queue, 3, 'succeed');
    expect(done).toContain(keyed);
    clock.advance(3_600_000);
    const fresh = await submit(queue);
    await runJobs(queue, 1, 'succeed');
    const queued = await submit(queue);

    expect(await bulk('clean', { queue, status: 'succeeded', older_than_ms: 2 * 3_600_000 })).toMatchObject({ count: 0 });
    expect(await bulk('clean', { queue, status: 'failed', older_than_ms: 0 })).toMatchObject({ count: 0 });
    const removedBefore = await countEvents(nc, queue, 'job.removed');
    expect(removedBefore).toBe(0);
    const reply = await bulk('clean', { queue, status: 'succeeded', older_than_ms: 1_800_000 });
    expect(reply.count).toBe(3);
    expect([...reply.job_ids].sort()).toEqual([...done].sort());
    const log = (await queueLog(nc, queue)).filter((e) => e.type === 'job.removed');
    expect(log.map((e) => e.data)).toEqual([{ reason: 'cleaned' }, { reason: 'cleaned' }, { reason: 'cleaned' }]);

    // Gone from progress and list; the others stay.
    expect(await progressOf(queue)).toMatchObject({ success: 1, pending: 1, total: 2, removed: 3 });
    expect((await progressOf(queue)).counts).not.toHaveProperty('removed');
    expect((await listIds(queue)).sort()).toEqual([fresh, queued].sort());
    // get shows it removed, its history with the removal last; its run kept.
    const detail = await client.get(keyed);
    expect(detail.job.status).toBe('removed');
    expect(detail.run).toMatchObject({ status: 'completed' });
    expect(detail.history.at(-1)).toMatchObject({ type: 'job.removed' });
    // The key is free: a new submit of it creates a new job.
    expect(node.keys.liveJob(queue, JSON.stringify('user-7'))).toBeUndefined();
    const again = await client.submit({ queue, key: 'user-7' });
    expect(again).toMatchObject({ created: true, status: 'queued' });
    expect(again.job_id).not.toBe(keyed);

    // explain reads the log: the job is shown removed, with why.
    const explained = await docket(['explain', keyed, '--json']);
    expect(explained.code).toBe(0);
    const explanation = JSON.parse(explained.stdout) as { status: string; notes: string[] };
    expect(explanation.status).toBe('removed');
    expect(explanation.notes.join('\n')).toMatch(/removed \(cleaned\)/);

    // A second clean finds nothing more; a resend of the first (no id) likewise appends nothing.
    expect(await bulk('clean', { queue, status: 'succeeded', older_than_ms: 0 })).toMatchObject({ count: 1, job_ids: [fresh] });
    expect(await countEvents(nc, queue, 'job.removed')).toBe(4);
  });

  test('a node folding the log from zero, and one restoring a checkpoint, hold the same projections after clean', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submitMany(queue, 6);
    await submit(queue, { key: 'k-1' });
    await runJobs(queue, 4, 'succeed');
    await runJobs(queue, 2, 'fail');
    await bulk('clean', { queue, status: 'succeeded', older_than_ms: 0 });
    await bulk('clean', { queue, status: 'failed', older_than_ms: 0, id: `cl-${queue}` });
    await caughtUp(node, jsm);
    const keys = [{ queue, key: 'k-1' }];
    const live = captureProjections(node, [queue], keys);
    expect(Object.values(live.jobs).filter((j) => (j.state as { job: { value: string } }).job.value === 'removed')).toHaveLength(6);
    expect(live.queueIndex[queue]).toHaveLength(1);

    // The log as stored audits clean: every job.removed (and cancel, retry) a legal transition.
    const audit = await docket(['audit', '--queue', queue, '--json']);
    expect(audit.code, audit.stderr).toBe(0);
    expect(JSON.parse(audit.stdout)).toMatchObject({ ok: true, violationCount: 0, jobs: 7 });

    const dir = await mkdtemp(join(tmpdir(), 'docket-bulk-'));
    dirs.push(dir);
    const replayed = await startTrackedNode(server, { clock, nodeName: 'bulk-replayed', dataDir: dir });
    try {
      await caughtUp(replayed, jsm);
      expect(captureProjections(replayed, [queue], keys)).toEqual(live);
      expect(replayed.store.refused).toBe(0);
      await replayed.checkpoint();
    } finally {
      await replayed.close();
    }
    const restored = await startTrackedNode(server, { clock, nodeName: 'bulk-restored', dataDir: dir });
    try {
      await caughtUp(restored, jsm);
      expect(captureProjections(restored, [queue], keys)).toEqual(live);
    } finally {
      await restored.close();
    }
  });
});

describe('job.removed of a job not yet run (the generic event job sets build on)', () => {
  /** Appends job.removed through the write door, on the node that leads the queue. */
  function remove(jobId: string, reason: 'stale' | 'orphan' | 'deleted' | 'completed') {
    return transitionJob(node.context, jobId, undefined, (record, eventId) => envelope(node.context, 'job.removed', record, eventId, { reason }));
  }

  test('a queued keyed job and a delayed job leave the queue order, progress, list and the key index; a running job is refused', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const keyed = await submit(queue, { key: { subject_id: 1 } });
    const delayed = await submit(queue, { delay_ms: 60_000 });
    const other = await submit(queue);
    expect(node.queueOrder.snapshot(queue).ready).toEqual([keyed, other]);

    await remove(keyed, 'stale');
    await remove(delayed, 'orphan');
    expect(node.queueOrder.snapshot(queue)).toEqual({ ready: [other], delayed: [] });
    expect(node.queueOrder.depth(queue)).toBe(1);
    expect(await progressOf(queue)).toMatchObject({ pending: 1, delayed: 0, total: 1 });
    expect(await listIds(queue)).toEqual([other]);
    expect((await client.get(keyed)).job).toMatchObject({ status: 'removed', finished_at: toIso(clock.now()) });
    // Its key is free: a submit of the key creates the key's next job.
    const again = await client.submit({ queue, key: { subject_id: 1 } });
    expect(again).toMatchObject({ created: true, status: 'queued' });
    expect(node.keys.liveJob(queue, '{"subject_id":1}')).toBe(again.job_id);

    // The dispatcher hands out only what is left; a running job cannot be removed.
    const claimed = await claim(nc, queue, { max: 5 });
    expect(claimed.map((j) => j.job_id)).toEqual([other, again.job_id]);
    const refused = await remove(other, 'deleted').then(() => null, (err: unknown) => err);
    expect(refused).toBeInstanceOf(DocketError);
    expect(refused).toMatchObject({ code: 'invalid_transition', message: `cannot remove job ${other}: it is running` });
    // A removed job stays removed: a second removal is refused too.
    await expect(remove(keyed, 'completed')).rejects.toMatchObject({ code: 'invalid_transition', message: `cannot remove job ${keyed}: it is already removed` });
  });
});

describe('bad input', () => {
  test('an unknown queue, a bad status, a negative or missing older_than_ms, an unknown field: invalid_request naming it, nothing appended', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue);
    const messages = await streamMessages(jsm);
    const cases: [string, Record<string, unknown>, RegExp][] = [
      ['retry_all', { queue: uniqueQueue('never-used') }, /unknown queue/],
      ['cancel_all', { queue: uniqueQueue('never-used'), status: 'queued' }, /unknown queue/],
      ['clean', { queue: uniqueQueue('never-used'), status: 'succeeded', older_than_ms: 0 }, /unknown queue/],
      ['cancel_all', { queue, status: 'running' }, /status/],
      ['cancel_all', { queue }, /status/],
      ['clean', { queue, status: 'queued', older_than_ms: 0 }, /status/],
      ['clean', { queue, status: 'removed', older_than_ms: 0 }, /status/],
      ['clean', { queue, status: 'succeeded', older_than_ms: -1 }, /older_than_ms/],
      ['clean', { queue, status: 'succeeded' }, /older_than_ms/],
      ['clean', { queue, status: 'succeeded', older_than_ms: 1.5 }, /older_than_ms/],
      ['retry_all', { queue, since: 'yesterday' }, /since/],
      ['retry_all', { queue: 'no spaces allowed' }, /queue/],
      ['retry_all', { queue, force: true }, /unknown field force/],
    ];
    for (const [verb, body, message] of cases) {
      const reply: RawReply = await request(nc, verb, body);
      expect(reply, `${verb} ${JSON.stringify(body)}`).toMatchObject({ ok: false, error: { code: 'invalid_request', message: expect.stringMatching(message) } });
    }
    expect(await streamMessages(jsm)).toBe(messages);
  });
});

// ---------------------------------------------------------------------------------------------
// The CLI, run as a user runs it (no terminal here: stdin is not a TTY).

// stdin an open pipe, not a terminal: a command that waited for an answer would hang; it must refuse at once.
const docket = (args: string[]) => runDocket(server.url, args, { stdin: 'pipe' });

describe('CLI: retry-all, cancel-all, clean', () => {
  test('without a terminal and without --yes each refuses, saying so, and changes nothing; --dry-run counts; --yes --json acts', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submitMany(queue, 3, { max_attempts: 1 });
    await runJobs(queue, 2, 'fail');
    const messages = await streamMessages(jsm);

    const refused = await docket(['retry-all', queue]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/error invalid_request: not a terminal, so nobody can confirm: Retry 2 failed jobs of queue .*\. Pass --yes/);
    expect(await streamMessages(jsm)).toBe(messages);

    const counted = await docket(['cancel-all', queue, '--status', 'queued', '--dry-run']);
    expect(counted).toMatchObject({ code: 0, stdout: `would cancel 1 queued job of queue ${queue} (dry run: nothing changed)\n` });
    const countedJson = await docket(['clean', queue, '--status', 'failed', '--older-than', '0', '--dry-run', '--json']);
    expect(JSON.parse(countedJson.stdout)).toMatchObject({ ok: true, count: 2, dry_run: true });
    expect(await streamMessages(jsm)).toBe(messages);

    const retried = await docket(['retry-all', queue, '--yes', '--json']);
    expect(retried.code).toBe(0);
    const retriedReply = JSON.parse(retried.stdout) as { ok: boolean; count: number; job_ids: string[] };
    expect(retriedReply).toMatchObject({ ok: true, count: 2 });
    expect(retriedReply.job_ids).toHaveLength(2);

    const cancelled = await docket(['cancel-all', queue, '--status', 'queued', '--yes']);
    expect(cancelled).toMatchObject({ code: 0, stdout: `cancelled 3 jobs of queue ${queue}\n` });
    expect(await progressOf(queue)).toMatchObject({ pending: 0, cancelled: 3, error: 2 });

    clock.advance(10 * 60_000);
    const tooRecent = await docket(['clean', queue, '--status', 'cancelled', '--older-than', '1h', '--yes']);
    expect(tooRecent).toMatchObject({ code: 0, stdout: `nothing to do: no cancelled job of queue ${queue} ended at least 1h ago\n` });
    const cleaned = await docket(['clean', queue, '--status', 'cancelled', '--older-than', '5m', '--yes']);
    expect(cleaned).toMatchObject({ code: 0, stdout: `removed 3 jobs from queue ${queue} (the log keeps them)\n` });
    expect(await progressOf(queue)).toMatchObject({ cancelled: 0, error: 2, total: 2, removed: 3 });
    // Cleaned to nothing, the queue is still one the node knows (not "no queue").
    expect(await docket(['clean', queue, '--status', 'failed', '--older-than', '0', '--yes'])).toMatchObject({ code: 0, stdout: `removed 2 jobs from queue ${queue} (the log keeps them)\n` });
    expect(await progressOf(queue)).toMatchObject({ total: 0, removed: 5 });
    const shown = await docket(['progress', queue]);
    expect(shown.stdout).not.toMatch(/no queue/);
    expect(shown.stdout).toContain(queue);

    const bad = await docket(['clean', queue, '--status', 'cancelled', '--older-than', 'soon', '--yes']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error invalid_request: --older-than must be a duration/);
    const unknown = await docket(['cancel-all', uniqueQueue('nope'), '--status', 'queued', '--yes']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/error invalid_request: unknown queue/);
  });
});
