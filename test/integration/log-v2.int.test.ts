/**
 * Log v2's contract on a real nats-server: one stored message per commit on the partition's
 * subject, the commit JSON and its headers as DESIGN specifies, the hash chain, live commits (and
 * with `liveEvents: 'each'` live events) on core NATS, a stream that is not v2 refused at start, and a commit the stream refuses answered
 * `unavailable` and completed exactly once by a resend.
 */
import { jetstreamManager, DiscardPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { decodeCommit as publicDecode } from 'docket';
import { COMMIT_VERSION } from '../../machines/index.js';
import type { Client } from '../../src/client/client.js';
import { commitHash, decodeCommit } from '../../src/nats/codec.js';
import { EXPECTED_HEADER, LIVE_SEQ_HEADER, LOG_SUBJECTS, MSG_ID_HEADER, queuePartition, STREAM, subjects } from '../../src/nats/subjects.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { closeTestFile, connectTestClients, countEvents, request, startTrackedNode, uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'log-v2' });
  ({ client, nc, jsm } = await connectTestClients(server, 'log-v2-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

/** Every stored message of a queue's partition, in order, with its headers. */
async function partitionMessages(queue: string): Promise<{ seq: number; data: Uint8Array; msgId: string | undefined; expected: string | undefined }[]> {
  const out = [];
  const subject = subjects.partition(queuePartition(queue));
  let seq = 1;
  for (;;) {
    const m = await jsm.streams.getMessage(STREAM, { seq, next_by_subj: subject } as unknown as { seq: number });
    if (!m) break;
    out.push({ seq: m.seq, data: m.data, msgId: m.header?.get(MSG_ID_HEADER), expected: m.header?.get(EXPECTED_HEADER) });
    seq = m.seq + 1;
  }
  return out;
}

describe('commits', () => {
  test('a batch is a few commits on docket.log.q.<queue>: each names its writer and partition, expects the previous commit, and chains its hash', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { jobs } = await client.submitBatch(Array.from({ length: 2_000 }, (_, i) => ({ queue, params: { i } })));
    expect(jobs.every((j) => j.ok)).toBe(true);
    await client.submit({ queue, params: { last: true } });
    const messages = await partitionMessages(queue);
    expect(messages.length).toBeGreaterThanOrEqual(2);
    expect(messages.length).toBeLessThan(100);
    let previous: (typeof messages)[number] | undefined;
    let events = 0;
    for (const m of messages) {
      const commit = decodeCommit(m.data);
      expect(commit).toMatchObject({ v: COMMIT_VERSION, partition: queuePartition(queue), writer: { node: 'log-v2', epoch: expect.any(Number) } });
      expect(m.msgId).toBe(commit.commit);
      expect(m.expected).toBe(String(previous?.seq ?? 0));
      expect(commit.prev_hash).toBe(previous ? commitHash(previous.data) : null);
      for (const event of commit.events) {
        expect(Object.keys(event).sort()).toEqual(['aggregate', 'data', 'id', 'meta', 'queue', 'time', 'type']);
        expect(event.aggregate).toEqual({ kind: 'job', id: (event.data as { job_id: string }).job_id });
      }
      // As stored: each submit holds its id, params and priority, and nothing that holds what its absence means.
      const stored = JSON.parse(Buffer.from(m.data).toString('utf8')) as { events: { data: Record<string, unknown> }[] };
      for (const event of stored.events) expect(Object.keys(event.data).sort()).toEqual(['job_id', 'params', 'priority']);
      events += commit.events.length;
      previous = m;
    }
    expect(events).toBe(2_001);
  });

  test('live commits: each commit, as stored, on docket.live.q.<queue> with its sequence in Docket-Seq; no message per event by default', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const sub = nc.subscribe(subjects.liveQueues(queue), { max: 2 });
    const perEvent = nc.subscribe(subjects.jobs(queue));
    await nc.flush();
    const { job_id } = await client.submit({ queue });
    await client.cancel(job_id);
    const got = [];
    for await (const m of sub) got.push({ subject: m.subject, seq: Number(m.headers?.get(LIVE_SEQ_HEADER)), data: m.data });
    const stored = await partitionMessages(queue);
    expect(got.map((g) => [g.subject, g.seq])).toEqual(stored.map((m) => [subjects.live(queuePartition(queue)), m.seq]));
    expect(got.map((g) => Buffer.from(g.data).toString())).toEqual(stored.map((m) => Buffer.from(m.data).toString()));
    expect(got.map((g) => decodeCommit(g.data).events.map((e) => e.type))).toEqual([['job.submitted'], ['job.cancelled']]);
    // The submit as stored leaves its absent fields out; the package's decodeCommit reads it whole.
    expect(Object.keys((JSON.parse(Buffer.from(got[0]!.data).toString()) as { events: { data: object }[] }).events[0]!.data).sort()).toEqual(['job_id', 'params', 'priority']);
    expect(publicDecode(got[0]!.data).events[0]!.data).toMatchObject({ job_id, key: null, position: null, max_attempts: 1, attempt: 1, retry_of: null, waiting: false, backoff: { base_ms: 1_000, max_ms: 3_600_000, jitter: 0.2 } });
    await nc.flush();
    perEvent.unsubscribe();
    expect(perEvent.getProcessed()).toBe(0);
  });

  test("live events with liveEvents: 'each': each committed event on docket.evt.job.<queue>.<id> as well, with its position", async ({ task }) => {
    const own = await startNatsServer();
    const eachNode = await startTrackedNode(own, { nodeName: 'log-v2-each', liveEvents: 'each' });
    const ownClients = await connectTestClients(own, 'log-v2-each-test');
    try {
      const queue = uniqueQueue(task.name);
      const sub = ownClients.nc.subscribe(subjects.jobs(queue), { max: 2 });
      const commits = ownClients.nc.subscribe(subjects.liveQueues(queue), { max: 2 });
      await ownClients.nc.flush();
      const { job_id } = await ownClients.client.submit({ queue });
      await ownClients.client.cancel(job_id);
      const got = [];
      for await (const m of sub) got.push({ subject: m.subject, event: m.json<{ type: string; position: { seq: number; index: number } }>() });
      expect(got.map((g) => [g.subject, g.event.type])).toEqual([
        [subjects.job(queue, job_id), 'job.submitted'],
        [subjects.job(queue, job_id), 'job.cancelled'],
      ]);
      const [first, second] = got.map((g) => g.event.position);
      expect(second!.seq).toBeGreaterThan(first!.seq);
      const seqs = [];
      for await (const m of commits) seqs.push(Number(m.headers?.get(LIVE_SEQ_HEADER)));
      expect(seqs).toEqual([first!.seq, second!.seq]);
    } finally {
      await closeTestFile({ client: ownClients.client, nc: ownClients.nc, nodes: [eachNode], server: own });
    }
  });
});

describe('Client.live()', () => {
  test('yields each committed event of the queue with its position, filtered by type', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const abort = new AbortController();
    const live = client.live({ queue, types: ['job.cancelled'], signal: abort.signal });
    await live.ready;
    const { job_id } = await client.submit({ queue });
    await client.cancel(job_id);
    const first = await live.next();
    abort.abort();
    expect(first.value).toMatchObject({ type: 'job.cancelled', aggregate: { kind: 'job', id: job_id }, queue, position: { seq: expect.any(Number), index: 0 } });
    const [, cancelled] = await partitionMessages(queue);
    expect((first.value as { position: { seq: number } }).position.seq).toBe(cancelled!.seq);
  });

  test('a commit that names a wanted type only in its data is read, and yields none of its events', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const abort = new AbortController();
    const live = client.live({ queue, types: ['job.cancelled'], signal: abort.signal });
    await live.ready;
    // A commit is passed over unparsed when its bytes name none of the wanted types (the plain
    // submit's); the decoy's params name one, so its commit is parsed, and yields nothing.
    await client.submit({ queue, params: { note: 'job.cancelled' } });
    const { job_id } = await client.submit({ queue });
    await client.cancel(job_id);
    const first = await live.next();
    abort.abort();
    expect(first.value).toMatchObject({ type: 'job.cancelled', aggregate: { kind: 'job', id: job_id } });
  });
});

describe('start-up', () => {
  test('a DOCKET stream that is not v2 (v1 bound docket.evt.>) is refused with a message saying what to do', async () => {
    const own = await startNatsServer();
    const ownNc = await connect({ servers: own.url });
    try {
      await (await jetstreamManager(ownNc)).streams.add({ name: STREAM, subjects: ['docket.evt.>'], storage: StorageType.File });
      const started = startNode({ nc: ownNc, nodeName: 'v1-stream' });
      await expect(started).rejects.toMatchObject({ code: 'invalid_request', message: expect.stringMatching(/not a docket log v2 stream.*fresh stream/s) });
    } finally {
      await ownNc.close();
      await own.stop();
    }
  });
});

describe('a commit the stream refuses', () => {
  test('answers its commands unavailable and appends nothing; the same command resent after the limit is lifted completes exactly once', async ({ task }) => {
    const own = await startNatsServer();
    const ownNc = await connect({ servers: own.url });
    const ownJsm = await jetstreamManager(ownNc);
    // An operator's DOCKET with a message limit and discard new: the stream refuses when full.
    await ownJsm.streams.add({ name: STREAM, subjects: [LOG_SUBJECTS], storage: StorageType.File, max_msgs: 1, discard: DiscardPolicy.New });
    const writer = await startTrackedNode(own, { nodeName: 'refused' });
    try {
      const queue = uniqueQueue(task.name);
      expect((await request(ownNc, 'submit', { queue, id: 'first' })).ok).toBe(true);
      const refused = await request(ownNc, 'submit', { id: 'batch-1', jobs: [{ queue, params: { n: 1 } }, { queue, params: { n: 2 } }] });
      expect(refused).toMatchObject({ ok: true, jobs: [{ ok: false, error: { code: 'unavailable' } }, { ok: false, error: { code: 'unavailable' } }] });
      // Plain submits (no key, no command id) go to the writer together: refused together.
      const plain = await request(ownNc, 'submit', { jobs: [{ queue, params: { n: 3 } }, { queue, params: { n: 4 } }] });
      expect(plain).toMatchObject({ ok: true, jobs: [{ ok: false, error: { code: 'unavailable' } }, { ok: false, error: { code: 'unavailable' } }] });
      expect((await ownJsm.streams.info(STREAM)).state.messages).toBe(1);
      await ownJsm.streams.update(STREAM, { subjects: [LOG_SUBJECTS], max_msgs: -1, discard: DiscardPolicy.New });
      const resent = await request(ownNc, 'submit', { id: 'batch-1', jobs: [{ queue, params: { n: 1 } }, { queue, params: { n: 2 } }] });
      expect(resent).toMatchObject({ ok: true, jobs: [{ ok: true, created: true }, { ok: true, created: true }] });
      const again = await request(ownNc, 'submit', { id: 'batch-1', jobs: [{ queue, params: { n: 1 } }, { queue, params: { n: 2 } }] });
      expect(again).toMatchObject({ ok: true, jobs: [{ ok: true }, { ok: true }] });
      expect(await countEvents(ownNc, queue, 'job.submitted')).toBe(3);
    } finally {
      await writer.close();
      await ownNc.close();
      await own.stop();
    }
  });
});
