/**
 * Eviction of finished jobs through a real node (issue 12 item 7): once a finished job's
 * retention has passed (a ManualClock moved past it, then the node's sweep awaited), its body
 * leaves memory; `get` reads it back from the log, a resent submit (same command id, same
 * derived id) creates nothing, a keyed submit of its key behaves as before, a depends_on naming
 * it is decided by its status, a command on it is decided as before; and a restart from the
 * checkpoint keeps all of it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { replayJob } from '../../src/audit/replay.js';
import { createJobLoader } from '../../src/cli/audit-commands.js';
import { positionalJobLoader } from '../../src/cli/positional-loader.js';
import { ManualClock } from '../../src/clock.js';
import { canonicalJson, keyedJobId, retryJobId } from '../../src/ids.js';
import type { DocketNode } from '../../src/node.js';
import { STREAM } from '../../src/nats/subjects.js';
import { closeTestFile, connectTestClients, request, startTrackedNode, uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, fail } from '../support/worker-helpers.js';

const RETENTION_MS = 60_000;

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
let dataDir: string;
const clock = new ManualClock(Date.now());

beforeAll(async () => {
  server = await startNatsServer();
  dataDir = await mkdtemp(join(tmpdir(), 'docket-evict-'));
  node = await startTrackedNode(server, { nodeName: 'evict', dataDir, clock, finishedRetentionMs: RETENTION_MS });
  ({ client, nc } = await connectTestClients(server, 'evict-test'));
  jsm = await jetstreamManager(nc);
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
  await rm(dataDir, { recursive: true, force: true });
});

async function send(verb: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const reply = await request(nc, verb, body);
  if (!reply.ok) throw new Error(JSON.stringify(reply.error));
  return reply;
}

const commits = async () => (await jsm.streams.info(STREAM)).state.last_seq;

/** Moves the clock past the retention and awaits the node's sweep. */
async function evictFinished(): Promise<number> {
  clock.advance(RETENTION_MS + 1);
  return node.evictor.sweep();
}

async function runToSuccess(queue: string, body: Record<string, unknown> = {}): Promise<string> {
  const jobId = (await send('submit', { queue, ...body }))['job_id'] as string;
  const [job] = await claim(nc, queue);
  expect(job!.job_id).toBe(jobId);
  await complete(nc, queue, job!, { done: jobId });
  return jobId;
}

describe('finished jobs leave memory after the retention period', () => {
  test('get reads an evicted job back from the log; a resent submit creates nothing; it leaves list, not progress', async () => {
    const queue = uniqueQueue('evict-get');
    const jobId = await runToSuccess(queue, { id: 'evict-get-1', params: { n: 1 } });
    const before = (await send('get', { job_id: jobId }));
    const live = await send('submit', { queue: uniqueQueue('evict-live') });
    expect(await evictFinished()).toBeGreaterThanOrEqual(1);
    expect(node.store.get(jobId)).toBeUndefined();
    expect(node.store.evicted(jobId)?.status).toBe('succeeded');
    // A live job is never evicted.
    expect(node.store.get(live['job_id'] as string)?.state.job.value).toBe('queued');

    const after = await send('get', { job_id: jobId });
    expect(after['evicted']).toBe(true);
    expect(after['job']).toEqual(before['job']);
    expect(after['run']).toEqual(before['run']);
    expect(after['history']).toEqual(before['history']);
    // Read back for `get` only: memory keeps no copy.
    expect(node.store.get(jobId)).toBeUndefined();

    const seq = await commits();
    const resent = await send('submit', { queue, id: 'evict-get-1', params: { n: 1 } });
    expect(resent).toMatchObject({ job_id: jobId, status: 'succeeded', created: true });
    expect(await commits()).toBe(seq);
    // A reused command id with another body is still refused.
    const conflict = await request(nc, 'submit', { queue, id: 'evict-get-1', params: { n: 2 } });
    expect(conflict.ok).toBe(false);
    expect(await commits()).toBe(seq);

    expect((await client.list({ queue })).jobs).toEqual([]);
    expect((await client.progress(queue))[0]!.counts.succeeded).toBe(1);
  });

  test('replay --job and explain read an evicted job\'s commits by position, not by scanning the log', async () => {
    const queue = uniqueQueue('evict-replay');
    const jobId = await runToSuccess(queue, { params: { n: 7 } });
    const scanned = await replayJob(jobId, createJobLoader(nc), retryJobId);
    await evictFinished();
    expect(node.store.get(jobId)).toBeUndefined();
    // The fallback throws: the answer can only come from the positions the node gave.
    const noScan = () => Promise.reject(new Error('scanned the log'));
    const positional = await replayJob(jobId, positionalJobLoader(nc, noScan), retryJobId);
    expect(positional).toEqual(scanned);
    expect(positional?.job.status).toBe('succeeded');
    // A job still in memory is read by the scan, as before (it also shows events a node refused).
    const live = (await send('submit', { queue }))['job_id'] as string;
    await expect(replayJob(live, positionalJobLoader(nc, noScan), retryJobId)).rejects.toThrow('scanned the log');
  });

  test('a keyed submit of an evicted key behaves as before: the next generation, and a resent keyed submit finds its own job', async () => {
    const queue = uniqueQueue('evict-key');
    const key = { subject: 42 };
    const first = (await send('submit', { queue, key, id: 'evict-key-1' }))['job_id'] as string;
    expect(first).toBe(keyedJobId(queue, canonicalJson(key), 0));
    await send('cancel', { job_id: first });
    await evictFinished();
    expect(node.store.get(first)).toBeUndefined();

    const seq = await commits();
    const resent = await send('submit', { queue, key, id: 'evict-key-1' });
    expect(resent).toMatchObject({ job_id: first, status: 'cancelled', created: true });
    expect(await commits()).toBe(seq);

    const next = await send('submit', { queue, key });
    expect(next).toMatchObject({ job_id: keyedJobId(queue, canonicalJson(key), 1), created: true });
    const again = await send('submit', { queue, key });
    expect(again).toMatchObject({ job_id: next['job_id'], created: false });
  });

  test('depends_on an evicted succeeded job: the job is not held; on an evicted failed one: refused as before', async () => {
    const queue = uniqueQueue('evict-deps');
    const done = await runToSuccess(queue);
    const failedId = (await send('submit', { queue, max_attempts: 1 }))['job_id'] as string;
    const [job] = await claim(nc, queue);
    await fail(nc, queue, job!);
    await evictFinished();
    expect(node.store.get(done)).toBeUndefined();
    expect(node.store.get(failedId)).toBeUndefined();

    const dependent = await send('submit', { queue, depends_on: [done] });
    expect(dependent['status']).toBe('queued');
    const refused = await request(nc, 'submit', { queue, depends_on: [failedId] });
    expect(refused.ok).toBe(false);
    expect((refused as { error: { code: string; message: string } }).error.message).toContain('ended failed');
  });

  test('a command on an evicted job is decided as before: a retry by hand creates its retry once; a cancel is refused', async () => {
    const queue = uniqueQueue('evict-retry');
    const failedId = (await send('submit', { queue, max_attempts: 1 }))['job_id'] as string;
    const [job] = await claim(nc, queue);
    await fail(nc, queue, job!);
    const done = await runToSuccess(queue);
    await evictFinished();
    expect(node.store.get(failedId)).toBeUndefined();

    const retry = await send('retry', { job_id: failedId, id: 'evict-retry-1' });
    expect(retry['created']).toBe(true);
    const seq = await commits();
    expect(await send('retry', { job_id: failedId, id: 'evict-retry-1' })).toMatchObject({ job_id: retry['job_id'] });
    expect(await commits()).toBe(seq);

    const cancel = await request(nc, 'cancel', { job_id: done });
    expect(cancel.ok).toBe(false);
    expect((cancel as { error: { code: string } }).error.code).toBe('invalid_transition');
  });

  test('a restart from the checkpoint keeps evicted jobs evicted, their ids taken and their bodies readable', async () => {
    const queue = uniqueQueue('evict-restart');
    const jobId = await runToSuccess(queue, { id: 'evict-restart-1' });
    await evictFinished();
    expect(node.store.get(jobId)).toBeUndefined();
    const evictedCount = node.store.evictedCount;
    await node.close();
    node = await startTrackedNode(server, { nodeName: 'evict', dataDir, clock, finishedRetentionMs: RETENTION_MS });
    expect(node.store.evictedCount).toBe(evictedCount);
    expect(node.store.get(jobId)).toBeUndefined();
    expect(node.store.evicted(jobId)?.status).toBe('succeeded');

    expect(await send('get', { job_id: jobId })).toMatchObject({ evicted: true, job: { job_id: jobId, status: 'succeeded' } });
    expect((await client.progress(queue))[0]!.counts.succeeded).toBe(1);
    // The resend reads the body back to decide as before (the next sweep evicts it again).
    const seq = await commits();
    expect(await send('submit', { queue, id: 'evict-restart-1' })).toMatchObject({ job_id: jobId, created: true });
    expect(await commits()).toBe(seq);
    await evictFinished();
    expect(node.store.get(jobId)).toBeUndefined();
    expect(node.store.evictedCount).toBe(evictedCount);
  });
});
