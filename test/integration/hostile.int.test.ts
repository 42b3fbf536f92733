/**
 * Issue 12: no request can stop a node. Each item of the issue fixed here has a test named
 * after it, reproducing the finding with raw NATS requests (any client could send them) against
 * a real nats-server: the reply is a small, correct error, nothing is appended, the node lives.
 *
 * One server (default 1 MiB max payload) and one node for most tests; a second server with a
 * 24 KiB max payload for the replies that must be cut to fit (cheaper than megabytes).
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { envelope, transitionJob, type CommandContext } from '../../src/commands/handle-command.js';
import { Limits } from '../../src/commands/limits.js';
import { DocketError, type ErrorBody } from '../../src/errors.js';
import { LEADERS_BUCKET, WORK_VERBS } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import type { JobStore } from '../../src/store/job-store.js';
import { capturingLogger, closeTestFile, connectTestClients, lastSeq, queueLog, startTrackedNode, uniqueQueue, type RawReply } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { eventually, untilJob } from '../support/worker-helpers.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const log = capturingLogger('debug');

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'hostile-a', logger: log.logger });
  ({ client, nc, jsm } = await connectTestClients(server, 'hostile-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

interface Answer {
  readonly bytes: number;
  readonly reply: RawReply;
}

/** Sends `body` as is to any subject; the reply and its size on the wire. */
async function raw(conn: NatsConnection, subject: string, body: string | Uint8Array, timeout = 15_000): Promise<Answer> {
  const msg = await conn.request(subject, body, { timeout });
  return { bytes: msg.data.length, reply: msg.json<RawReply>() };
}

function errorOf(reply: RawReply): ErrorBody {
  if (reply.ok) throw new Error(`expected an error, got ${JSON.stringify(reply).slice(0, 300)}`);
  expect(Object.keys(reply).sort()).toEqual(['error', 'ok']);
  return reply.error;
}

function okOf(reply: RawReply): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

interface Claimed {
  readonly job_id: string;
  readonly run_id: string;
}

/** Submits a job to `queue` and claims it through docket.work.<queue>.claim. */
async function claimOne(conn: NatsConnection, queue: string, params: Record<string, unknown> = {}): Promise<Claimed> {
  await raw(conn, 'docket.cmd.submit', JSON.stringify({ queue, params }));
  const { reply } = await raw(conn, `docket.work.${queue}.claim`, JSON.stringify({ worker: 'w', max: 1 }));
  const jobs = okOf(reply)['jobs'] as Claimed[];
  expect(jobs).toHaveLength(1);
  return { job_id: jobs[0]!.job_id, run_id: jobs[0]!.run_id };
}

/** Asserts the stream's last sequence did not move while `act` ran. */
async function appendsNothing<T>(act: () => Promise<T>): Promise<T> {
  const before = await lastSeq(jsm);
  const result = await act();
  expect(await lastSeq(jsm)).toBe(before);
  return result;
}

describe('item 1: every reply is bounded, nothing escapes a handler', () => {
  test('item 1: a 600,000-character field name on every docket.cmd.* and docket.work.* subject gets a short invalid_request, and the node lives', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const body = JSON.stringify({ ['k'.repeat(600_000)]: 1 });
    const subjects = [
      ...['submit', 'cancel', 'retry', 'move', 'get', 'list', 'progress', 'frobnicate', 'v'.repeat(3_000)].map((verb) => `docket.cmd.${verb}`),
      ...WORK_VERBS.map((verb) => `docket.work.${queue}.${verb}`),
      // The leader inbox of this node (whether or not it leads the queue: bad input is refused as such).
      `docket.leader.${node.name}.${queue}.heartbeat`,
    ];
    for (const subject of subjects) {
      const { bytes, reply } = await appendsNothing(() => raw(nc, subject, body));
      const error = errorOf(reply);
      expect(error.code, subject.slice(0, 40)).toBe('invalid_request');
      expect(bytes, subject.slice(0, 40)).toBeLessThan(1_024);
    }
    // Alive and serving.
    expect(await client.submit({ queue })).toMatchObject({ status: 'queued', created: true });
  });

  test('item 1: list with limit 1,000 over jobs with 1 KB keys pages under the max payload, and paging lists every job once', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const key = (i: number) => `${String(i).padStart(4, '0')}${'k'.repeat(1_000)}`;
    for (let from = 0; from < 1_000; from += 500) {
      const { jobs } = await client.submitBatch(Array.from({ length: 500 }, (_, i) => ({ queue, key: key(from + i) })));
      expect(jobs.every((j) => j.ok)).toBe(true);
    }
    const maxPayload = nc.info!.max_payload;
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    for (;;) {
      const { bytes, reply } = await raw(nc, 'docket.cmd.list', JSON.stringify({ queue, limit: 1_000, ...(cursor === undefined ? {} : { cursor }) }));
      const page = okOf(reply) as { jobs: { key: string }[]; next_cursor: string | null };
      expect(bytes).toBeLessThanOrEqual(maxPayload);
      pages += 1;
      seen.push(...page.jobs.map((j) => j.key));
      if (page.next_cursor === null) break;
      cursor = page.next_cursor;
    }
    expect(pages).toBeGreaterThan(1);
    expect(seen).toEqual(Array.from({ length: 1_000 }, (_, i) => key(i)));
  });
});

describe('with a 24 KiB max payload', () => {
  const MAX_PAYLOAD = 24 * 1024;
  let small: TestNatsServer;
  let smallNode: DocketNode;
  let snc: NatsConnection;
  let sclient: Client;

  beforeAll(async () => {
    small = await startNatsServer({ maxPayload: MAX_PAYLOAD });
    smallNode = await startTrackedNode(small, { nodeName: 'hostile-small' });
    ({ client: sclient, nc: snc } = await connectTestClients(small, 'hostile-small-test'));
    expect(snc.info!.max_payload).toBe(MAX_PAYLOAD);
  });

  afterAll(async () => {
    await closeTestFile({ client: sclient, nc: snc, nodes: [smallNode], server: small });
  });

  test('item 1: progress over more queues than fit one reply is cut to fit with truncated: true', async ({ task }) => {
    const prefix = uniqueQueue(task.name).slice(0, 40);
    const queues = Array.from({ length: 150 }, (_, i) => `${prefix}-${String(i).padStart(3, '0')}`);
    const { reply: submitted } = await raw(snc, 'docket.cmd.submit', JSON.stringify({ jobs: queues.map((queue) => ({ queue })) }));
    expect(okOf(submitted)['jobs']).toHaveLength(150);
    const { bytes, reply } = await raw(snc, 'docket.cmd.progress', '{}');
    const progress = okOf(reply) as { queues: { queue: string }[]; truncated?: boolean };
    expect(bytes).toBeLessThanOrEqual(MAX_PAYLOAD);
    expect(progress.truncated).toBe(true);
    expect(progress.queues.length).toBeGreaterThan(0);
    expect(progress.queues.length).toBeLessThan(150);
    // A prefix of every queue by name: what is given is whole and in order.
    const all = [...smallNode.progress.all().map((p) => p.queue)];
    expect(progress.queues.map((q) => q.queue)).toEqual(all.slice(0, progress.queues.length));
    // One queue still answers in full.
    const { reply: one } = await raw(snc, 'docket.cmd.progress', JSON.stringify({ queue: queues[149] }));
    expect(okOf(one)).toMatchObject({ queues: [{ queue: queues[149], total: 1 }] });
  });

  test('item 1: get of a job whose history outgrows a reply gives the oldest history that fits, with truncated: true', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { reply } = await raw(snc, 'docket.cmd.submit', JSON.stringify({ queue }));
    const jobId = String(okOf(reply)['job_id']);
    for (let i = 0; i < 260; i++) okOf((await raw(snc, 'docket.cmd.move', JSON.stringify({ job_id: jobId, priority: i % 2 }))).reply);
    const { bytes, reply: got } = await raw(snc, 'docket.cmd.get', JSON.stringify({ job_id: jobId }));
    const detail = okOf(got) as { history: { type: string }[]; truncated?: boolean; job: { job_id: string } };
    expect(bytes).toBeLessThanOrEqual(MAX_PAYLOAD);
    expect(detail.job.job_id).toBe(jobId);
    expect(detail.truncated).toBe(true);
    expect(detail.history[0]!.type).toBe('job.submitted');
    expect(detail.history.length).toBeLessThan(261);
  });

  test('item 1 and 11: a reply that cannot fit is a small invalid_request naming the max payload, not unavailable, and the node lives', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const run = await claimOne(snc, queue, { blob: 'p'.repeat(14 * 1024) });
    okOf((await raw(snc, `docket.work.${queue}.complete`, JSON.stringify({ ...run, result: 'r'.repeat(14 * 1024) }))).reply);
    const { bytes, reply } = await appendsNothing(() => raw(snc, 'docket.cmd.get', JSON.stringify({ job_id: run.job_id })));
    const error = errorOf(reply);
    expect(error.code).toBe('invalid_request');
    expect(error.message).toContain(String(MAX_PAYLOAD));
    expect(bytes).toBeLessThan(1_024);
    okOf((await raw(snc, 'docket.cmd.progress', JSON.stringify({ queue }))).reply);
  });
});

describe('item 3: invalid UTF-8', () => {
  test('item 3: a body with invalid UTF-8 is refused with invalid_request, not read with U+FFFD', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const body = Buffer.concat([Buffer.from(`{"queue":"${queue}","params":{"s":"`), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}}')]);
    const { reply } = await appendsNothing(() => raw(nc, 'docket.cmd.submit', body));
    const error = errorOf(reply);
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(/UTF-8/);
    expect(await queueLog(nc, queue)).toEqual([]);
    const work = errorOf((await raw(nc, `docket.work.${queue}.heartbeat`, Buffer.concat([Buffer.from('{"run_ids":["'), Buffer.from([0x80]), Buffer.from('"]}')]))).reply);
    expect(work).toMatchObject({ code: 'invalid_request', message: expect.stringMatching(/UTF-8/) });
  });
});

describe('item 4: prototype keys', () => {
  test('item 4: __proto__, constructor and prototype are unknown fields on every command, single or batch; nothing is appended', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const cases: [string, string][] = [];
    for (const key of ['__proto__', 'constructor', 'prototype']) {
      cases.push(
        ['docket.cmd.submit', `{"queue":"${queue}","${key}":{"priority":1}}`],
        ['docket.cmd.submit', `{"id":"c1","queue":"${queue}","${key}":1}`],
        ['docket.cmd.submit', `{"jobs":[{"queue":"${queue}","${key}":{}}]}`],
        ['docket.cmd.submit', `{"jobs":[{"queue":"${queue}"}],"${key}":{}}`],
        ['docket.cmd.cancel', `{"job_id":"j1","${key}":{}}`],
        ['docket.cmd.list', `{"queue":"${queue}","${key}":{}}`],
        [`docket.work.${queue}.claim`, `{"worker":"w","${key}":{}}`],
        [`docket.work.${queue}.complete`, `{"run_id":"r","job_id":"j","${key}":{}}`],
      );
    }
    for (const [subject, body] of cases) {
      const { reply } = await appendsNothing(() => raw(nc, subject, body));
      const error = errorOf(reply);
      expect(error.code, body).toBe('invalid_request');
      expect(error.message, body).toMatch(/unknown field.*(__proto__|constructor|prototype)/);
    }
    expect(await queueLog(nc, queue)).toEqual([]);
  });
});

describe('item 6: heartbeat progress', () => {
  test('item 6: progress over the documented limit is refused with invalid_request naming the field and the limit', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const run = await claimOne(nc, queue);
    const big = { run_ids: [run.run_id], progress: { [run.run_id]: 'x'.repeat(Limits.MaxProgressBytes) } };
    const error = errorOf((await raw(nc, `docket.work.${queue}.heartbeat`, JSON.stringify(big))).reply);
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(/progress/);
    expect(error.message).toContain(String(Limits.MaxProgressBytes));
    const fits = { run_ids: [run.run_id], progress: { [run.run_id]: 'x'.repeat(Limits.MaxProgressBytes - 2) } };
    expect(okOf((await raw(nc, `docket.work.${queue}.heartbeat`, JSON.stringify(fits))).reply)).toMatchObject({ lost: [] });
  });

  test('item 6: progress is logged at debug, not info, and only for runs the worker holds', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const run = await claimOne(nc, queue);
    const body = { run_ids: [run.run_id, 'not-a-held-run'], progress: { [run.run_id]: { pct: 50 }, 'not-a-held-run': { pct: 1 }, 'not-even-heartbeated': { pct: 2 } } };
    const reply = okOf((await raw(nc, `docket.work.${queue}.heartbeat`, JSON.stringify(body))).reply);
    expect(reply['lost']).toEqual(['not-a-held-run']);
    const progressLines = log.lines.filter((l) => l.msg === 'progress' && l['queue'] === queue);
    expect(progressLines).toHaveLength(1);
    expect(progressLines[0]).toMatchObject({ level: 20, runId: run.run_id, progress: { pct: 50 } });
  });
});

describe('item 10: bounded events', () => {
  test('item 10: a result over 64 KiB of JSON is refused naming result and the limit; one at the limit is stored', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const run = await claimOne(nc, queue);
    // A JSON string of n characters is n + 2 bytes.
    const over = 'r'.repeat(Limits.MaxResultBytes - 1);
    const error = errorOf((await appendsNothing(() => raw(nc, `docket.work.${queue}.complete`, JSON.stringify({ ...run, result: over })))).reply);
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(/result/);
    expect(error.message).toContain(String(Limits.MaxResultBytes));
    const atLimit = 'r'.repeat(Limits.MaxResultBytes - 2);
    expect(okOf((await raw(nc, `docket.work.${queue}.complete`, JSON.stringify({ ...run, result: atLimit }))).reply)).toMatchObject({ job_id: run.job_id, status: 'succeeded' });
  });

  test('item 10: an error message or stack over 16 KiB is refused naming the field and the limit; nothing is appended', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const run = await claimOne(nc, queue);
    // 'é' is two bytes: the bound is on bytes, not characters.
    const overBytes = 'é'.repeat(Limits.MaxErrorMessageBytes / 2) + 'x';
    for (const [field, error] of [
      ['error.message', { message: overBytes }],
      ['error.stack', { message: 'boom', stack: overBytes }],
    ] as const) {
      const refused = errorOf((await appendsNothing(() => raw(nc, `docket.work.${queue}.fail`, JSON.stringify({ ...run, error })))).reply);
      expect(refused.code).toBe('invalid_request');
      expect(refused.message).toContain(field);
      expect(refused.message).toContain(String(Limits.MaxErrorMessageBytes));
    }
    expect((await client.get(run.job_id)).job.status).toBe('running');
  });

  test('item 10: the SDK worker keeps to the bounds: a result over 64 KiB fails its run saying why, an over-long error is cut to fit', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { jobs } = await client.submitBatch([{ queue, params: { kind: 'big-result' } }, { queue, params: { kind: 'long-error' } }]);
    const ids = jobs.map((j) => (j.ok ? j.job_id : ''));
    const worker = new Worker({
      servers: server.url,
      queue,
      concurrency: 2,
      handler: (job) => {
        if (job.params['kind'] === 'big-result') return { blob: 'r'.repeat(Limits.MaxResultBytes) };
        throw new Error('é'.repeat(Limits.MaxErrorMessageBytes));
      },
    });
    await worker.start();
    try {
      await Promise.all(ids.map((id) => untilJob(node, id, (r) => r.state.job.value === 'failed', 'failed')));
      const failed = await Promise.all(ids.map((id) => client.get(id)));
      expect(failed[0]!.run).toMatchObject({ error: { message: expect.stringContaining(`at most ${Limits.MaxResultBytes}`) } });
      const message = (failed[1]!.run as { error: { message: string } }).error.message;
      expect(Buffer.byteLength(message)).toBeLessThanOrEqual(Limits.MaxErrorMessageBytes);
      expect(message.startsWith('éé')).toBe(true);
      // Counted when the fail's reply comes back, a moment after the node stored it.
      await eventually(() => worker.counts.failed === 2, 'the worker counted both failures');
      expect(worker.counts).toMatchObject({ succeeded: 0, failed: 2, lost: 0 });
    } finally {
      await worker.close();
    }
  });
});

describe('item 11: misleading codes', () => {
  test('item 11: docket.work.é.claim names the bad queue name, not the list of verbs', async () => {
    const error = errorOf((await raw(nc, 'docket.work.é.claim', '{"worker":"w"}')).reply);
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(/queue name "é"/);
    expect(error.message).not.toMatch(/verbs/);
    const verb = errorOf((await raw(nc, 'docket.work.fine.frob', '{}')).reply);
    expect(verb.message).toMatch(/unknown work verb "frob"/);
  });

  test('item 11: a node that never led a queue says it does not lead it, not that it "no longer leads" it', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const error = errorOf((await raw(nc, `docket.leader.${node.name}.${queue}.claim`, '{"worker":"w"}')).reply);
    expect(error.code).toBe('unavailable');
    expect(error.message).toMatch(/does not lead/);
    expect(error.message).not.toMatch(/no longer/);
  });

  test('item 11: an oversized request from the SDK is invalid_request naming the limit, not an outage', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobs = Array.from({ length: 20 }, () => ({ queue, params: { blob: 'b'.repeat(60_000) } }));
    let caught: unknown;
    try {
      await client.submitBatch(jobs);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(DocketError);
    expect((caught as DocketError).code).toBe('invalid_request');
    expect((caught as DocketError).message).toContain(`max payload of ${nc.info!.max_payload} bytes`);
  });
});

describe('item 2: a claim never takes what its reply cannot carry', () => {
  test('item 2: claim {max: 20} over jobs with 60 KB params hands out what fits one reply; the rest stay queued, unclaimed', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const big = 'x'.repeat(60_000);
    const { jobs: submitted } = await client.submitBatch(Array.from({ length: 8 }, (_, i) => ({ queue, params: { i, big } })));
    const { jobs: more } = await client.submitBatch(Array.from({ length: 12 }, (_, i) => ({ queue, params: { i: i + 8, big } })));
    expect([...submitted, ...more].every((j) => j.ok)).toBe(true);
    const { bytes, reply } = await raw(nc, `docket.work.${queue}.claim`, JSON.stringify({ worker: 'w', max: 20 }));
    const jobs = okOf(reply)['jobs'] as Claimed[];
    // 20 × 60 KB is more than the 1 MiB max payload: fewer jobs, and all of them delivered.
    expect(bytes).toBeLessThanOrEqual(1024 * 1024);
    expect(jobs.length).toBeGreaterThan(0);
    expect(jobs.length).toBeLessThan(20);
    const log = await queueLog(nc, queue);
    expect(log.filter((e) => e.type === 'job.claimed').map((e) => e.jobId).sort()).toEqual(jobs.map((j) => j.job_id).sort());
    const [progress] = await client.progress(queue);
    expect(progress!.counts.queued).toBe(20 - jobs.length);
    // The rest come with the next claim.
    const { reply: second } = await raw(nc, `docket.work.${queue}.claim`, JSON.stringify({ worker: 'w', max: 20 }));
    expect((okOf(second)['jobs'] as Claimed[]).length).toBe(20 - jobs.length);
  });
});

describe('item 5: work requests do not mint queues', () => {
  test('item 5: bad work requests to new queue names take no lease; an idle queue is let go after a lease period and led again on demand', async ({ task }) => {
    const kv = await new Kvm(nc).open(LEADERS_BUCKET);
    const keys = async (): Promise<string[]> => {
      const out: string[] = [];
      for await (const k of await kv.keys()) out.push(k);
      return out;
    };
    for (let i = 0; i < 50; i++) {
      for (const [verb, body] of [['claim', '{'], ['heartbeat', '{"run_ids":"x"}'], ['complete', '{}'], ['fail', '[]']] as const) {
        const { reply } = await raw(nc, `docket.work.minted-${i}.${verb}`, body);
        expect(errorOf(reply).code).toBe('invalid_request');
      }
    }
    // No lease names a queue the bad requests named. (Not a count of all keys: other tests'
    // leases may age out of the bucket meanwhile; CI saw 10 keys become 8.)
    expect((await keys()).filter((k) => k.startsWith('minted-'))).toEqual([]);

    // A node with a short lease: a queue whose work is done is let go, then led again on demand.
    const own = await startNatsServer();
    const brief = await startTrackedNode(own, { nodeName: 'hostile-brief', leadershipLeaseMs: 600 });
    const ownNc = await connect({ servers: own.url });
    try {
      const queue = uniqueQueue(task.name);
      await raw(ownNc, 'docket.cmd.submit', JSON.stringify({ queue }));
      const { reply } = await raw(ownNc, `docket.work.${queue}.claim`, JSON.stringify({ worker: 'w', max: 1 }));
      const [job] = okOf(reply)['jobs'] as Claimed[];
      expect(brief.leadership.isLeader(queue)).toBe(true);
      okOf((await raw(ownNc, `docket.work.${queue}.complete`, JSON.stringify({ job_id: job!.job_id, run_id: job!.run_id }))).reply);
      await eventually(() => !brief.leadership.leading().includes(queue), 'the idle queue let go', 10_000);
      // The next request leads it again.
      await raw(ownNc, 'docket.cmd.submit', JSON.stringify({ queue }));
      expect(brief.leadership.isLeader(queue)).toBe(true);
    } finally {
      await ownNc.close();
      await brief.close();
      await own.stop();
    }
  });
});
