/**
 * Every command of issue 2 through NATS, against a real nats-server: submit (single, keyed, with
 * a command id, delayed), a 10,000-job batch, cancel, get, list, progress, events(), and every
 * class of bad input (refused with `invalid_request` naming the field, nothing appended).
 *
 * One server and one node for the file; each test takes its own queue. The node's clock is a
 * ManualClock, so run_at and queue order are exact.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ManualClock, toIso } from '../../src/clock.js';
import { DocketError } from '../../src/errors.js';
import { canonicalJson } from '../../src/ids.js';
import { queuePartition, subjects } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { consumerListening, countEvents, lastSeq, openResources, queueLog, rawRequest, request, startTrackedNode, streamMessages, take, uniqueQueue, closeTestFile, connectTestClients } from '../support/docket.js';
import type { NatsConnection } from '@nats-io/nats-core';
import type { JetStreamManager } from '@nats-io/jetstream';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-03-01T12:00:00.000Z'));

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { clock, nodeName: 'commands-a' });
  ({ client, nc, jsm } = await connectTestClients(server, 'commands-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(() => {
  // Only the file's node stays open between tests.
  expect(openResources()).toHaveLength(1);
});

/** Closes the node and starts a new one on the same stream (it folds the whole log again). */
async function restartNode(): Promise<void> {
  await node.close();
  node = await startTrackedNode(server, { clock, nodeName: 'commands-b' });
}

/** The error a client call rejects with. */
async function rejection(p: Promise<unknown>): Promise<DocketError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof DocketError) return err;
    throw err;
  }
  throw new Error('expected the call to be refused');
}

describe('submit', () => {
  test('one job: queued with the defaults, one job.submitted on docket.evt.job.<queue>.<job_id>', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const before = await streamMessages(jsm);
    const reply = await client.submit({ queue, params: { size: 128 } });
    expect(reply).toEqual({ job_id: expect.any(String), status: 'queued', created: true });
    expect(await streamMessages(jsm)).toBe(before + 1);

    const log = await queueLog(nc, queue);
    expect(log).toHaveLength(1);
    expect(log[0]).toMatchObject({ subject: subjects.job(queue, reply.job_id), type: 'job.submitted' });
    expect(log[0]!.msgId).not.toBe(log[0]!.id); // Nats-Msg-Id is the commit id, not the event id
    expect(log[0]!.data).toMatchObject({ job_id: reply.job_id, priority: 5, key: null, params: { size: 128 }, run_at: toIso(clock.now()) });

    const detail = await client.get(reply.job_id);
    expect(detail.job).toMatchObject({ job_id: reply.job_id, queue, status: 'queued', priority: 5, params: { size: 128 }, key: null, attempt: 1, max_attempts: 1 });
    expect(detail.run).toBeNull();
    expect(detail.history).toEqual([{ seq: log[0]!.seq, index: 0, type: 'job.submitted', time: toIso(clock.now()), id: log[0]!.id }]);
  });

  test('keyed: while the key has a live job the same key returns it with created:false and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await client.submit({ queue, key: { subject_id: 42, session: 3 }, params: { a: 1 } });
    expect(first).toMatchObject({ status: 'queued', created: true });
    const before = await streamMessages(jsm);
    // Same key, keys in another order, other params: still the same live job.
    const again = await client.submit({ queue, key: { session: 3, subject_id: 42 }, params: { a: 2 } });
    expect(again).toEqual({ job_id: first.job_id, status: 'queued', created: false });
    expect(await streamMessages(jsm)).toBe(before);
    expect((await client.get(first.job_id)).job.params).toEqual({ a: 1 });
    // A string key is its own key; the same key in another queue is another job.
    const other = await client.submit({ queue: `${queue}-x`, key: { subject_id: 42, session: 3 } });
    expect(other.created).toBe(true);
    expect(other.job_id).not.toBe(first.job_id);
  });

  test('keyed: after the key\'s job ended, the same key creates a new job, and that one is then the live one', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await client.submit({ queue, key: 'subject-7' });
    await client.cancel(first.job_id);
    const second = await client.submit({ queue, key: 'subject-7' });
    expect(second).toMatchObject({ status: 'queued', created: true });
    expect(second.job_id).not.toBe(first.job_id);
    const third = await client.submit({ queue, key: 'subject-7' });
    expect(third).toEqual({ job_id: second.job_id, status: 'queued', created: false });
    expect((await queueLog(nc, queue)).map((e) => e.type)).toEqual(['job.submitted', 'job.cancelled', 'job.submitted']);
  });

  test('with a command id: a resend returns the first result and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const id = `cmd-${queue}`;
    const first = await client.submit({ id, queue, params: { n: 1 } });
    expect(first.created).toBe(true);
    const before = await streamMessages(jsm);
    const again = await client.submit({ id, queue, params: { n: 1 } });
    expect(again).toEqual(first);
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('with a command id: a resend after a restart (no Nats-Msg-Id dedupe to help) returns the first result', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const id = `cmd-${queue}`;
    const first = await client.submit({ id, queue });
    await restartNode();
    const before = await streamMessages(jsm);
    expect(await client.submit({ id, queue })).toEqual(first);
    expect(await streamMessages(jsm)).toBe(before);
    expect(await queueLog(nc, queue)).toHaveLength(1);
  });

  test('keyed with a command id: a resend returns the first result (created:true), not a different answer', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const id = `cmd-${queue}`;
    const first = await client.submit({ id, queue, key: 'k1' });
    expect(first.created).toBe(true);
    const before = await streamMessages(jsm);
    const again = await client.submit({ id, queue, key: 'k1' });
    expect(await streamMessages(jsm)).toBe(before);
    // DESIGN: "a resent command with the same id returns the first result" (unkeyed does).
    expect(again).toEqual(first);
  });

  test('keyed with a command id: a resend after the key\'s job ended returns the first job and creates none', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const id = `cmd-${queue}`;
    const first = await client.submit({ id, queue, key: 'k1' });
    await client.cancel(first.job_id);
    const before = await streamMessages(jsm);
    // The client did not get the first reply and sends the same command again.
    const again = await client.submit({ id, queue, key: 'k1' });
    expect(again.job_id).toBe(first.job_id);
    expect(await streamMessages(jsm)).toBe(before);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(1);
  });

  test('delay_ms and run_at: run_at is exact, the job waits apart and joins the queue when its time comes', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const now = clock.now();
    const delayed = await client.submit({ queue, delay_ms: 60_000 });
    const at = await client.submit({ queue, run_at: '2026-03-01T14:30:00+02:00' }); // 12:30Z, 30 min ahead
    const past = await client.submit({ queue, run_at: '2020-01-01T00:00:00Z' });
    const ready = await client.submit({ queue });
    expect((await client.get(delayed.job_id)).job.run_at).toBe(toIso(now + 60_000));
    expect((await client.get(at.job_id)).job.run_at).toBe('2026-03-01T12:30:00.000Z');
    expect((await client.get(past.job_id)).job.run_at).toBe('2020-01-01T00:00:00.000Z');

    expect(node.queueOrder.snapshot(queue)).toEqual({
      ready: [past.job_id, ready.job_id],
      delayed: [
        { jobId: delayed.job_id, runAtMs: now + 60_000 },
        { jobId: at.job_id, runAtMs: Date.parse('2026-03-01T12:30:00Z') },
      ],
    });
    // Once its time has come a job takes its place by (priority, position, seq): all four share
    // priority 5, so the delayed one, submitted first, goes to the head.
    clock.advance(60_000);
    expect(node.queueOrder.snapshot(queue)).toEqual({
      ready: [delayed.job_id, past.job_id, ready.job_id],
      delayed: [{ jobId: at.job_id, runAtMs: Date.parse('2026-03-01T12:30:00Z') }],
    });
    clock.advance(30 * 60_000);
    expect(node.queueOrder.snapshot(queue)).toEqual({ ready: [delayed.job_id, at.job_id, past.job_id, ready.job_id], delayed: [] });
  });

  test('priority: lower runs first, then submit order; the default is 5', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const p9 = await client.submit({ queue, priority: 9 });
    const p5a = await client.submit({ queue });
    const p0 = await client.submit({ queue, priority: 0 });
    const p5b = await client.submit({ queue, priority: 5 });
    const p255 = await client.submit({ queue, priority: 255 });
    expect(node.queueOrder.snapshot(queue).ready).toEqual([p0, p5a, p5b, p9, p255].map((r) => r.job_id));
  });

  test('params are stored exactly as sent, awkward keys included', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const params = JSON.parse('{"__proto__":{"x":1},"constructor":"c","a.b":[1,null,"✓",{"deep":true}],"":0}') as Record<string, unknown>;
    const reply = await request(nc, 'submit', { queue, params });
    expect(reply.ok).toBe(true);
    const jobId = String((reply as Record<string, unknown>)['job_id']);
    const detail = await client.get(jobId);
    expect(canonicalJson(detail.job.params)).toBe(canonicalJson(params));
  });
});

describe('command ids', () => {
  test('a command id reused with another body is refused with conflict naming the id; the same body returns the first result', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await request(nc, 'submit', { id: `${queue}-a`, queue, params: { n: 1 } });
    expect(first).toMatchObject({ ok: true, created: true });
    const before = await streamMessages(jsm);
    expect(await request(nc, 'submit', { id: `${queue}-a`, queue, params: { n: 2 } })).toMatchObject({ ok: false, error: { code: 'conflict', message: expect.stringContaining(`${queue}-a`) } });
    expect(await request(nc, 'submit', { id: `${queue}-a`, queue, params: { n: 1 } })).toMatchObject({ ok: true, job_id: (first as unknown as { job_id: string }).job_id });
    // Keyed, and one item of a batch: each item is remembered by its own body.
    expect((await request(nc, 'submit', { id: `${queue}-k`, queue, key: 'k1', params: { n: 1 } })).ok).toBe(true);
    const keyedMessages = await streamMessages(jsm);
    expect(await request(nc, 'submit', { id: `${queue}-k`, queue, key: 'k1', params: { n: 2 } })).toMatchObject({ ok: false, error: { code: 'conflict' } });
    const batch = [{ queue, params: { i: 0 } }, { queue, params: { i: 1 } }];
    expect(await request(nc, 'submit', { id: `${queue}-b`, jobs: batch })).toMatchObject({ ok: true, jobs: [{ ok: true }, { ok: true }] });
    const batchMessages = await streamMessages(jsm);
    expect(await request(nc, 'submit', { id: `${queue}-b`, jobs: [batch[0], { queue, params: { i: 9 } }] })).toMatchObject({ ok: true, jobs: [{ ok: true }, { ok: false, error: { code: 'conflict' } }] });
    // A cancel resent with another reason.
    const jobId = (first as unknown as { job_id: string }).job_id;
    expect((await request(nc, 'cancel', { id: `${queue}-c`, job_id: jobId, reason: 'one' })).ok).toBe(true);
    const cancelMessages = await streamMessages(jsm);
    expect(await request(nc, 'cancel', { id: `${queue}-c`, job_id: jobId, reason: 'two' })).toMatchObject({ ok: false, error: { code: 'conflict' } });
    expect(await request(nc, 'cancel', { id: `${queue}-c`, job_id: jobId, reason: 'one' })).toMatchObject({ ok: true, status: 'cancelled' });
    // Refusals appended nothing.
    expect(before).toBeGreaterThan(0);
    expect(keyedMessages).toBeGreaterThan(before);
    expect(await streamMessages(jsm)).toBe(cancelMessages);
    expect(batchMessages).toBeLessThan(cancelMessages);
    expect(await countEvents(nc, queue, 'job.submitted')).toBe(4);
  });
});

describe('batch submit', () => {
  test('10,000 jobs in one request: all created, progress counts 10,000; the same batch resent creates nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const id = `batch-${queue}`;
    const jobs = Array.from({ length: 10_000 }, (_, i) => ({ queue, priority: i % 256, params: { i } }));
    const before = await streamMessages(jsm);
    const { jobs: results } = await client.submitBatch(jobs, { id });
    expect(results).toHaveLength(10_000);
    expect(results.every((r) => r.ok && r.created && r.status === 'queued')).toBe(true);
    const ids = results.map((r) => (r.ok ? r.job_id : ''));
    expect(new Set(ids).size).toBe(10_000);
    expect(await countEvents(nc, queue, 'job.submitted')).toBe(10_000);
    // Group commits: far fewer stored messages than events.
    const stored = await streamMessages(jsm);
    expect(stored - before).toBeLessThan(1_000);

    const [progress] = await client.progress(queue);
    expect(progress).toMatchObject({ queue, pending: 10_000, total: 10_000, reserved: 0, success: 0, error: 0, ignore: 0 });
    expect(progress!.counts.queued).toBe(10_000);

    const { jobs: again } = await client.submitBatch(jobs, { id });
    expect(again.map((r) => (r.ok ? r.job_id : r.error.code))).toEqual(ids);
    expect(await streamMessages(jsm)).toBe(stored);
    expect((await client.progress(queue))[0]!.total).toBe(10_000);
  });

  test('a resent batch completes what was missing and doubles nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const id = `batch-${queue}`;
    const jobs = Array.from({ length: 10 }, (_, i) => ({ queue, params: { i } }));
    // The first send got only its first four items stored (as after a crash mid-batch).
    const partial = await client.submitBatch(jobs.slice(0, 4), { id });
    const before = await streamMessages(jsm);
    const full = await client.submitBatch(jobs, { id });
    expect(full.jobs.slice(0, 4).map((r) => r.ok && r.job_id)).toEqual(partial.jobs.map((r) => r.ok && r.job_id));
    expect(await streamMessages(jsm)).toBeGreaterThan(before);
    expect(await countEvents(nc, queue, 'job.submitted')).toBe(10);
    expect((await client.progress(queue))[0]!.total).toBe(10);
  });

  test('keyed items: one job per key within the batch and across resends', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobs = [
      { queue, key: 'a' },
      { queue, key: 'b' },
      { queue, key: 'a' },
      { queue, key: { x: 1 } },
    ];
    const { jobs: results } = await client.submitBatch(jobs);
    const okIds = results.map((r) => (r.ok ? r.job_id : r.error.code));
    expect(okIds[0]).toBe(okIds[2]);
    expect(results.filter((r) => r.ok && r.created)).toHaveLength(3);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(3);
    const { jobs: again } = await client.submitBatch(jobs);
    expect(again.every((r) => r.ok && !r.created)).toBe(true);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(3);
  });
});

describe('cancel', () => {
  test('a queued job is cancelled: one job.cancelled with the reason; it leaves the queue', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { job_id } = await client.submit({ queue });
    expect(node.queueOrder.snapshot(queue).ready).toEqual([job_id]);
    expect(await client.cancel(job_id, { reason: 'not needed' })).toMatchObject({ job_id, status: 'cancelled' });
    const log = await queueLog(nc, queue);
    expect(log.map((e) => e.type)).toEqual(['job.submitted', 'job.cancelled']);
    expect(log[1]!.data).toEqual({ reason: 'not needed' });
    expect(node.queueOrder.snapshot(queue).ready).toEqual([]);
    const detail = await client.get(job_id);
    expect(detail.job).toMatchObject({ status: 'cancelled', end_reason: 'not needed', finished_at: toIso(clock.now()) });
  });

  test('Client.cancel resolves to { job_id, status } as its type says, like the other methods', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { job_id } = await client.submit({ queue });
    // submit/get/list/progress strip the wire's `ok`; cancel passes the whole reply through.
    expect(await client.cancel(job_id)).toEqual({ job_id, status: 'cancelled' });
  });

  test('cancelling a cancelled job is invalid_transition and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { job_id } = await client.submit({ queue });
    await client.cancel(job_id);
    const before = await streamMessages(jsm);
    const err = await rejection(client.cancel(job_id));
    expect(err.code).toBe('invalid_transition');
    expect(err.message).toMatch(/cancelled/);
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('an unknown job is not_found and appends nothing', async () => {
    const before = await streamMessages(jsm);
    const err = await rejection(client.cancel('no-such-job'));
    expect(err.code).toBe('not_found');
    expect(err.message).toMatch(/no-such-job/);
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('with a command id: a resend returns the first result (also after a restart), not invalid_transition', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { job_id } = await client.submit({ queue });
    const id = `cancel-${queue}`;
    const first = await client.cancel(job_id, { id });
    const before = await streamMessages(jsm);
    expect(await client.cancel(job_id, { id })).toEqual(first);
    await restartNode();
    expect(await client.cancel(job_id, { id })).toEqual(first);
    expect(await streamMessages(jsm)).toBe(before);
    // Another command id is another cancel: refused.
    expect((await rejection(client.cancel(job_id, { id: `${id}-2` }))).code).toBe('invalid_transition');
  });
});

describe('get, list, progress', () => {
  test('get: state, params, run (null before a claim) and the history', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { job_id } = await client.submit({ queue, key: { subject_id: 1 }, params: { p: [1, 2] }, priority: 7, max_attempts: 3, backoff: { base_ms: 10, max_ms: 100, jitter: 0 } });
    await client.cancel(job_id, { reason: 'r' });
    const detail = await client.get(job_id);
    const log = await queueLog(nc, queue);
    expect(detail).toEqual({
      job: expect.objectContaining({
        job_id,
        queue,
        status: 'cancelled',
        key: { subject_id: 1 },
        params: { p: [1, 2] },
        priority: 7,
        max_attempts: 3,
        backoff: { base_ms: 10, max_ms: 100, jitter: 0 },
        retry_of: null,
        seq: log[0]!.seq,
      }),
      run: null,
      history: log.map((e) => ({ seq: e.seq, index: e.index, type: e.type, id: e.id, time: toIso(clock.now()) })),
    });
    expect((await rejection(client.get('nope'))).code).toBe('not_found');
  });

  test('list: status filter and cursor paging across pages, in submit order', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { jobs } = await client.submitBatch(Array.from({ length: 23 }, (_, i) => ({ queue, params: { i } })));
    const ids = jobs.map((r) => (r.ok ? r.job_id : ''));
    const cancelled = ids.filter((_, i) => i % 3 === 0);
    for (const id of cancelled) await client.cancel(id);
    const queued = ids.filter((id) => !cancelled.includes(id));

    const pages: string[][] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await client.list({ queue, status: 'queued', limit: 4, ...(cursor === undefined ? {} : { cursor }) });
      pages.push(page.jobs.map((j) => j.job_id));
      expect(page.jobs.every((j) => j.status === 'queued' && j.queue === queue)).toBe(true);
      if (page.next_cursor === null) break;
      cursor = page.next_cursor;
    }
    expect(pages.flat()).toEqual(queued);
    expect(pages.map((p) => p.length)).toEqual([4, 4, 4, 3]);

    const all = await client.list({ queue, limit: 1000 });
    expect(all.jobs.map((j) => j.job_id)).toEqual(ids);
    expect(all.next_cursor).toBeNull();
    expect((await client.list({ queue, status: 'cancelled' })).jobs.map((j) => j.job_id)).toEqual(cancelled);
    expect((await client.list({ queue, status: 'running' })).jobs).toEqual([]);
    // Exactly one full page: no cursor to an empty page.
    const exact = await client.list({ queue, status: 'cancelled', limit: cancelled.length });
    expect(exact.next_cursor).toBeNull();
  });

  test('progress: counts per state and the DataJoint view, per queue and for all queues', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { jobs } = await client.submitBatch(Array.from({ length: 5 }, () => ({ queue })));
    await client.cancel(jobs[0]!.ok ? jobs[0]!.job_id : '');
    await client.cancel(jobs[1]!.ok ? jobs[1]!.job_id : '');
    const expected = {
      queue,
      counts: { waiting: 0, queued: 3, running: 0, succeeded: 0, failed: 0, cancelled: 2, skipped: 0, ignored: 0 },
      pending: 3,
      delayed: 0,
      reserved: 0,
      success: 0,
      error: 0,
      ignore: 0,
      cancelled: 2,
      total: 5,
      // Nothing holds it (flow control).
      flow: { status: 'active', held: null, waiting_by_reason: {} },
    };
    expect(await client.progress(queue)).toEqual([expected]);
    expect((await client.progress()).find((p) => p.queue === queue)).toEqual(expected);
    const empty = await client.progress(uniqueQueue('never-used'));
    expect(empty[0]).toMatchObject({ total: 0, pending: 0 });
  });
});

describe('events()', () => {
  test('from a sequence: the queue\'s events from there, in stream order', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const a = await client.submit({ queue });
    const from = (await lastSeq(jsm)) + 1;
    const b = await client.submit({ queue });
    await client.cancel(a.job_id);
    const it = client.events({ queue, from })[Symbol.asyncIterator]();
    const got = await take(it, 2);
    await it.return?.(undefined);
    expect(got.map((e) => [e.event.type, e.subject])).toEqual([
      ['job.submitted', subjects.job(queue, b.job_id)],
      ['job.cancelled', subjects.job(queue, a.job_id)],
    ]);
    expect(got[0]!.seq).toBe(from);
  });

  test('filtered by queue and type; without a queue, every queue', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const other = `${queue}-o`;
    const from = (await lastSeq(jsm)) + 1;
    const a = await client.submit({ queue });
    const o = await client.submit({ queue: other });
    await client.cancel(o.job_id);
    await client.cancel(a.job_id);
    const onlyCancels = client.events({ queue, types: ['job.cancelled'], from })[Symbol.asyncIterator]();
    const [cancel] = await take(onlyCancels, 1);
    await onlyCancels.return?.(undefined);
    expect(cancel).toMatchObject({ subject: subjects.job(queue, a.job_id), event: { type: 'job.cancelled', queue } });

    const everything = client.events({ from })[Symbol.asyncIterator]();
    const all = await take(everything, 4);
    await everything.return?.(undefined);
    expect(all.map((e) => [e.event.queue, e.event.type])).toEqual([
      [queue, 'job.submitted'],
      [other, 'job.submitted'],
      [other, 'job.cancelled'],
      [queue, 'job.cancelled'],
    ]);
  });

  test('from a time: the first event stored at or after it', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    // Append until two events are stored in different milliseconds; start at the later one's.
    let log = await queueLog(nc, queue);
    while (log.length < 2 || log[log.length - 1]!.time === log[0]!.time) {
      await client.submit({ queue });
      log = await queueLog(nc, queue);
    }
    const lastMs = log[log.length - 1]!.time;
    const expected = log.filter((e) => e.time >= lastMs).map((e) => e.seq);
    const it = client.events({ queue, from: new Date(lastMs) })[Symbol.asyncIterator]();
    const got = await take(it, expected.length);
    await it.return?.(undefined);
    expect(got.map((e) => e.seq)).toEqual(expected);
  });

  test('from now: only events appended after it listens', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await client.submit({ queue }); // before: not delivered
    const it = client.events({ queue, from: 'now' })[Symbol.asyncIterator]();
    const first = it.next();
    await consumerListening(jsm, subjects.partition(queuePartition(queue)));
    const b = await client.submit({ queue });
    const got = await first;
    await it.return?.(undefined);
    expect(got.value).toMatchObject({ event: { type: 'job.submitted', data: { job_id: b.job_id } } });
  });

  test('from now (the default): an event appended right after events() was called is delivered', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const signal = AbortSignal.timeout(3000);
    const events = client.events({ queue, signal });
    const b = await client.submit({ queue });
    const got: string[] = [];
    for await (const e of events) {
      got.push(String((e.event.data as { job_id?: string }).job_id));
      break;
    }
    // A user reads "now" as the moment events() was called; the iterator starts its consumer
    // only on the first next(), so this submit is lost and the loop waits forever.
    expect(got).toEqual([b.job_id]);
  });
});

// ---------------------------------------------------------------------------------------------
// Bad input: each class is refused with invalid_request naming the field, and nothing appended.

const big = 'x'.repeat(64 * 1024);
interface BadCase {
  readonly name: string;
  readonly verb: string;
  /** A JSON value, or raw text when a string starting with RAW: */
  readonly body: (queue: string) => unknown;
  readonly field: RegExp;
}
const RAW = (text: string) => ({ [rawMark]: text });
const rawMark = '__raw__';

const badCases: BadCase[] = [
  { name: 'malformed JSON', verb: 'submit', body: () => RAW('{"queue": "a",'), field: /JSON/ },
  { name: 'a JSON array instead of an object', verb: 'submit', body: () => RAW('[1,2]'), field: /request|object/ },
  { name: 'JSON null', verb: 'submit', body: () => RAW('null'), field: /request|object/ },
  { name: 'missing queue', verb: 'submit', body: () => ({ params: {} }), field: /queue/ },
  { name: 'queue with a dot', verb: 'submit', body: () => ({ queue: 'a.b' }), field: /queue/ },
  { name: 'queue with a wildcard', verb: 'submit', body: () => ({ queue: 'a>' }), field: /queue/ },
  { name: 'queue with a space', verb: 'submit', body: () => ({ queue: 'a b' }), field: /queue/ },
  { name: 'empty queue', verb: 'submit', body: () => ({ queue: '' }), field: /queue/ },
  { name: 'queue of 65 characters', verb: 'submit', body: () => ({ queue: 'q'.repeat(65) }), field: /queue/ },
  { name: 'queue not a string', verb: 'submit', body: () => ({ queue: 7 }), field: /queue/ },
  { name: 'priority -1', verb: 'submit', body: (q) => ({ queue: q, priority: -1 }), field: /priority/ },
  { name: 'priority 256', verb: 'submit', body: (q) => ({ queue: q, priority: 256 }), field: /priority/ },
  { name: 'priority 1.5', verb: 'submit', body: (q) => ({ queue: q, priority: 1.5 }), field: /priority/ },
  { name: 'priority as a string', verb: 'submit', body: (q) => ({ queue: q, priority: '5' }), field: /priority/ },
  { name: 'negative delay_ms', verb: 'submit', body: (q) => ({ queue: q, delay_ms: -1 }), field: /delay_ms/ },
  { name: 'delay_ms beyond the representable time', verb: 'submit', body: (q) => ({ queue: q, delay_ms: Number.MAX_SAFE_INTEGER }), field: /delay_ms/ },
  { name: 'delay_ms with run_at', verb: 'submit', body: (q) => ({ queue: q, delay_ms: 10, run_at: '2030-01-01T00:00:00Z' }), field: /delay_ms|run_at/ },
  { name: 'run_at not a date-time', verb: 'submit', body: (q) => ({ queue: q, run_at: 'tomorrow' }), field: /run_at/ },
  { name: 'run_at on February 30', verb: 'submit', body: (q) => ({ queue: q, run_at: '2026-02-30T00:00:00Z' }), field: /run_at/ },
  { name: 'an unknown field', verb: 'submit', body: (q) => ({ queue: q, colour: 'red' }), field: /colour/ },
  { name: 'params over 64 KiB', verb: 'submit', body: (q) => ({ queue: q, params: { big } }), field: /params/ },
  { name: 'params nested 5,000 deep (10 KiB)', verb: 'submit', body: () => RAW(`{"queue":"deep","params":{"a":${'['.repeat(5000)}${']'.repeat(5000)}}}`), field: /params/ },
  { name: 'a key nested 5,000 deep', verb: 'submit', body: () => RAW(`{"queue":"deep","key":${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}}`), field: /key/ },
  { name: 'params not an object', verb: 'submit', body: (q) => ({ queue: q, params: [1] }), field: /params/ },
  { name: 'an empty key', verb: 'submit', body: (q) => ({ queue: q, key: '' }), field: /key/ },
  { name: 'an object key of 100 KiB (a string key is capped at 1024)', verb: 'submit', body: (q) => ({ queue: q, key: { k: 'k'.repeat(100 * 1024) } }), field: /key/ },
  { name: 'max_attempts 0', verb: 'submit', body: (q) => ({ queue: q, max_attempts: 0 }), field: /max_attempts/ },
  { name: 'backoff jitter over 1', verb: 'submit', body: (q) => ({ queue: q, backoff: { base_ms: 1, max_ms: 2, jitter: 2 } }), field: /backoff\.jitter/ },
  { name: 'a command id of 201 characters', verb: 'submit', body: (q) => ({ id: 'i'.repeat(201), queue: q }), field: /id/ },
  {
    name: 'a batch over 10,000 jobs',
    verb: 'submit',
    body: (q) => ({ jobs: Array.from({ length: 10_001 }, () => ({ queue: q })) }),
    field: /jobs/,
  },
  { name: 'an empty batch', verb: 'submit', body: () => ({ jobs: [] }), field: /jobs/ },
  { name: 'a batch with one bad item', verb: 'submit', body: (q) => ({ jobs: [{ queue: q }, { queue: q, priority: 300 }] }), field: /jobs\.1\.priority/ },
  { name: 'a batch item with an unknown field', verb: 'submit', body: (q) => ({ jobs: [{ queue: q, nope: 1 }] }), field: /jobs\.0\.nope/ },
  { name: 'a batch with an unknown top-level field', verb: 'submit', body: (q) => ({ jobs: [{ queue: q }], queue: q }), field: /queue/ },
  { name: 'cancel without job_id', verb: 'cancel', body: () => ({}), field: /job_id/ },
  { name: 'cancel with a job_id containing a dot', verb: 'cancel', body: () => ({ job_id: 'a.b' }), field: /job_id/ },
  { name: 'cancel with an unknown field', verb: 'cancel', body: () => ({ job_id: 'a', force: true }), field: /force/ },
  { name: 'cancel with malformed JSON', verb: 'cancel', body: () => RAW('{job_id: a}'), field: /JSON/ },
  { name: 'get with a numeric job_id', verb: 'get', body: () => ({ job_id: 5 }), field: /job_id/ },
  { name: 'list without queue', verb: 'list', body: () => ({}), field: /queue/ },
  { name: 'list with limit 0', verb: 'list', body: (q) => ({ queue: q, limit: 0 }), field: /limit/ },
  { name: 'list with limit 1001', verb: 'list', body: (q) => ({ queue: q, limit: 1001 }), field: /limit/ },
  { name: 'list with an unknown status', verb: 'list', body: (q) => ({ queue: q, status: 'done' }), field: /status/ },
  { name: 'list with a foreign cursor', verb: 'list', body: (q) => ({ queue: q, cursor: 'abc' }), field: /cursor/ },
  { name: 'progress with a malformed queue', verb: 'progress', body: () => ({ queue: 'a.*' }), field: /queue/ },
  { name: 'an unknown command', verb: 'frobnicate', body: () => ({}), field: /frobnicate/ },
];

describe('bad input', () => {
  test.each(badCases)('$verb: $name → invalid_request naming the field, nothing appended', async ({ verb, body, field, name }) => {
    const queue = uniqueQueue(name);
    const value = body(queue);
    const before = await streamMessages(jsm);
    const raw = value !== null && typeof value === 'object' && rawMark in value ? String((value as Record<string, string>)[rawMark]) : JSON.stringify(value);
    const reply = await rawRequest(nc, verb, raw);
    expect(reply.ok).toBe(false);
    if (reply.ok) return;
    expect(reply.error.code).toBe('invalid_request');
    expect(reply.error.message).toMatch(field);
    expect(await streamMessages(jsm)).toBe(before);
    expect(await queueLog(nc, queue)).toEqual([]);
  });

  test('the client refuses bad input with a typed InvalidRequestError', async () => {
    const err = await rejection(client.submit({ queue: 'no.dots', priority: 1 }));
    expect(err.code).toBe('invalid_request');
    expect(err.name).toBe('InvalidRequestError');
    expect(err.message).toMatch(/queue/);
  });
});
