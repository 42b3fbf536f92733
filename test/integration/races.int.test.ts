/**
 * Two nodes on one stream, racing. Commands are served in one queue group, so a request through
 * NATS reaches whichever node NATS picks; to make both nodes decide the same command at the same
 * moment, the tests call each node's registered handler directly (the append still goes through
 * JetStream, guarded by the expected last subject sequence). One test also floods the queue group
 * through NATS. After every race both nodes must hold the same projections.
 */
import fc from 'fast-check';
import { test as fcTest } from '@fast-check/vitest';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { subjects } from '../../src/nats/subjects.js';
import type { TestNatsServer } from '../support/nats-server.js';
import { callNode, captureProjections, caughtUp, openResources, queueLog, startTwoNodes, streamMessages, uniqueQueue, type RawReply, closeTestFile } from '../support/docket.js';

const NUM_RUNS = Number(process.env['DOCKET_NUM_RUNS'] ?? 20);

let server: TestNatsServer;
let a: DocketNode;
let b: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  // Tails switching between following and solo every few milliseconds (LogTail).
  ({ server, a, b, client, nc, jsm } = await startTwoNodes('race', { tail: { soloAfterMs: 10, checkEveryMs: 5 } }));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [a, b], server });
});

afterEach(() => {
  expect(openResources()).toHaveLength(2);
});

function fields(reply: RawReply): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${reply.error.code}: ${reply.error.message}`);
  return reply;
}

/** Both nodes have folded the whole stream and hold the same view of `queue`. */
async function nodesAgree(queue: string): Promise<void> {
  await caughtUp(a, jsm);
  await caughtUp(b, jsm);
  expect(captureProjections(b, [queue])).toEqual(captureProjections(a, [queue]));
}

const keyArb = fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), fc.dictionary(fc.constantFrom('subject_id', 'session', 'x'), fc.integer({ min: 0, max: 9 }), { minKeys: 1 }));

describe('two nodes racing', () => {
  let run = 0;
  fcTest.prop([keyArb, fc.boolean(), fc.boolean()], { numRuns: NUM_RUNS })(
    'the same keyed submit on both nodes at once gives one job: one created:true, one created:false, one job.submitted',
    async (key, keyEndedBefore, bFirst) => {
      const queue = `race-key-${++run}-${Math.random().toString(36).slice(2, 8)}`;
      let ended: string | undefined;
      if (keyEndedBefore) {
        // The key's first job has ended on both nodes: the race is for its next generation.
        ended = String(fields(await callNode(a, 'submit', { queue, key })).job_id);
        fields(await callNode(a, 'cancel', { job_id: ended }));
        await caughtUp(a, jsm);
        await caughtUp(b, jsm);
      }
      const before = await streamMessages(jsm);
      const body = { queue, key, params: { racer: true } };
      const [ra, rb] = bFirst
        ? (await Promise.all([callNode(b, 'submit', body), callNode(a, 'submit', body)])).reverse()
        : await Promise.all([callNode(a, 'submit', body), callNode(b, 'submit', body)]);
      const fa = fields(ra!);
      const fb = fields(rb!);
      expect(fa['job_id']).toBe(fb['job_id']);
      expect(fa['job_id']).not.toBe(ended);
      expect([fa['created'], fb['created']].sort()).toEqual([false, true]);
      expect(await streamMessages(jsm)).toBe(before + 1);
      expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(keyEndedBefore ? 2 : 1);
      await nodesAgree(queue);
    },
    60_000,
  );

  fcTest.prop([fc.boolean(), fc.integer({ min: 1, max: 5 })], { numRuns: NUM_RUNS })(
    'the same command id on both nodes at once gives one job (single or batch), one job.submitted per job',
    async (batch, size) => {
      const queue = `race-id-${++run}-${Math.random().toString(36).slice(2, 8)}`;
      const id = `cmd-${queue}`;
      const body = batch ? { id, jobs: Array.from({ length: size }, (_, i) => ({ queue, params: { i } })) } : { id, queue };
      const before = await streamMessages(jsm);
      const [ra, rb] = await Promise.all([callNode(a, 'submit', body), callNode(b, 'submit', body)]);
      const fa = fields(ra);
      const fb = fields(rb);
      const n = batch ? size : 1;
      if (batch) {
        const ids = (r: Record<string, unknown>) => (r['jobs'] as { ok: boolean; job_id: string }[]).map((j) => (j.ok ? j.job_id : 'error'));
        expect(ids(fa)).toEqual(ids(fb));
        expect(new Set(ids(fa)).size).toBe(size);
      } else {
        expect(fa['job_id']).toBe(fb['job_id']);
      }
      // Group commits: the n events may share commits.
      expect(await streamMessages(jsm)).toBeGreaterThan(before);
      expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(n);
      await nodesAgree(queue);
    },
    60_000,
  );

  fcTest.prop([fc.boolean(), fc.boolean()], { numRuns: NUM_RUNS })(
    'cancels racing from two nodes: exactly one succeeds, the other is invalid_transition, one job.cancelled',
    async (keyed, bFirst) => {
      const queue = `race-cancel-${++run}-${Math.random().toString(36).slice(2, 8)}`;
      const jobId = String(fields(await callNode(a, 'submit', keyed ? { queue, key: 'k' } : { queue })).job_id);
      await caughtUp(b, jsm); // both know the job: the race is on its next sequence
      const before = await streamMessages(jsm);
      const body = { job_id: jobId };
      const replies = bFirst
        ? await Promise.all([callNode(b, 'cancel', body), callNode(a, 'cancel', body)])
        : await Promise.all([callNode(a, 'cancel', body), callNode(b, 'cancel', body)]);
      const ok = replies.filter((r) => r.ok);
      const refused = replies.filter((r): r is Extract<RawReply, { ok: false }> => !r.ok);
      expect(ok).toHaveLength(1);
      expect(ok[0]).toMatchObject({ job_id: jobId, status: 'cancelled' });
      expect(refused.map((r) => r.error.code)).toEqual(['invalid_transition']);
      expect(await streamMessages(jsm)).toBe(before + 1);
      expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.cancelled')).toHaveLength(1);
      await nodesAgree(queue);
    },
    60_000,
  );

  test('a cancel with the same command id on both nodes: both answer the first result, one job.cancelled', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    for (let i = 0; i < NUM_RUNS; i++) {
      const jobId = String(fields(await callNode(a, 'submit', { queue })).job_id);
      await caughtUp(b, jsm);
      const body = { job_id: jobId, id: `cancel-${queue}-${i}` };
      const [ra, rb] = await Promise.all([callNode(a, 'cancel', body), callNode(b, 'cancel', body)]);
      expect(fields(ra)).toEqual(fields(rb));
      expect(fields(ra)).toMatchObject({ status: 'cancelled' });
    }
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.cancelled')).toHaveLength(NUM_RUNS);
    await nodesAgree(queue);
  });

  test('read your writes across nodes: a job submitted on one node can be cancelled at once on the other', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const failures: string[] = [];
    for (let i = 0; i < NUM_RUNS; i++) {
      const jobId = String(fields(await callNode(a, 'submit', { queue })).job_id);
      // The submit was acknowledged; the next command of the same client lands on the other node.
      const reply = await callNode(b, 'cancel', { job_id: jobId });
      if (!reply.ok) failures.push(`${i}: ${reply.error.code} ${reply.error.message}`);
    }
    expect(failures).toEqual([]);
  });

  test('read your writes across nodes: after a keyed job is cancelled on one node, the key submitted on the other creates a new job', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const failures: string[] = [];
    for (let i = 0; i < NUM_RUNS; i++) {
      const key = `k${i}`;
      const first = String(fields(await callNode(a, 'submit', { queue, key })).job_id);
      await caughtUp(b, jsm);
      fields(await callNode(a, 'cancel', { job_id: first }));
      const again = fields(await callNode(b, 'submit', { queue, key }));
      // A stale key index answers with the cancelled job as if it were live, and appends nothing.
      if (again['job_id'] === first || again['created'] !== true) failures.push(`${i}: ${JSON.stringify(again)}`);
    }
    expect(failures).toEqual([]);
  });

  test('a leader that gave its queue up is not asked again: the node that forwarded to it looks the lease up at once and serves', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    fields(await callNode(a, 'submit', { queue }));
    expect(a.leadership.isLeader(queue)).toBe(true);
    // b forwards to a, and caches a as the queue's leader for the rest of a's lease.
    fields(await callNode(b, 'submit', { queue }));
    await a.leadership.relinquish(queue);
    // Before: b asked a again until the cached lease ran out (up to 5 s), answered `unavailable`.
    const reply = await callNode(b, 'submit', { queue });
    expect(reply).toMatchObject({ ok: true, created: true });
    expect(b.leadership.isLeader(queue)).toBe(true);
  });

  test('a node that gave its queue up routes its next request by the lease, not by a leadership it remembered', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    fields(await callNode(a, 'submit', { queue }));
    await a.leadership.relinquish(queue);
    // Before: a had cached itself as the leader when it took the free lease, and sent every
    // request to itself, to be refused, until that cached lease ran out (up to 5 s).
    expect(await callNode(a, 'submit', { queue })).toMatchObject({ ok: true, created: true });
  });

  test('a work request forwarded to a node that no longer leads the queue is refused with the not-leader header, as commands are', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    fields(await callNode(a, 'submit', { queue }));
    await a.leadership.relinquish(queue);
    const reply = await nc.request(subjects.leaderWork(a.name, queue, 'heartbeat'), JSON.stringify({ worker: 'w', run_ids: [] }), { timeout: 5_000 });
    expect(reply.json()).toMatchObject({ ok: false, error: { code: 'unavailable' } });
    expect(reply.headers?.get('Docket-Not-Leader')).toBe('1');
  });

  test('through NATS: a client that submits then cancels at once never gets not_found', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const failures: string[] = [];
    for (let i = 0; i < NUM_RUNS * 2; i++) {
      const { job_id } = await client.submit({ queue });
      await client.cancel(job_id).catch((err: { code?: string; message?: string }) => failures.push(`${i}: ${err.code} ${err.message}`));
    }
    expect(failures).toEqual([]);
  });

  test('through NATS: 50 concurrent submits of one key, spread over both nodes by the queue group, give one job', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const replies = await Promise.all(Array.from({ length: 50 }, () => client.submit({ queue, key: { subject_id: 42, session: 3 } })));
    expect(new Set(replies.map((r) => r.job_id)).size).toBe(1);
    expect(replies.filter((r) => r.created)).toHaveLength(1);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(1);
    await nodesAgree(queue);
  });

  test('through NATS: 20 concurrent cancels of one job give one success and 19 invalid_transition', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { job_id } = await client.submit({ queue });
    await caughtUp(a, jsm);
    await caughtUp(b, jsm);
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => client.cancel(job_id)));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const codes = results.flatMap((r) => (r.status === 'rejected' ? [(r.reason as { code?: string }).code] : []));
    expect(codes).toEqual(Array.from({ length: 19 }, () => 'invalid_transition'));
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.cancelled')).toHaveLength(1);
    await nodesAgree(queue);
  });
});
