/**
 * The log tail's solo mode: a node that is the only writer stops its consumer and moves its
 * position with its own acks; another writer's event brings the consumer back, through one of
 * four signals (a hint on the noEcho append connection, a gap before an own append, a wait for a
 * sequence past the position, the stream staying ahead of the position for a check period). The
 * periodic check is run by hand here (checkEveryMs is an hour), so each test sees the one signal
 * it is about: only the test of waiting calls `tail.waitFor`, which starts the consumer by itself.
 */
import { jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { envelope } from '../../src/commands/handle-command.js';
import { JobDefaults } from '../../src/commands/limits.js';
import { queuePartition, subjects } from '../../src/nats/subjects.js';
import { encodeCommit } from '../../src/nats/codec.js';
import { commitSeqOf, positionOf } from '../../machines/index.js';
import type { DocketNode } from '../../src/node.js';
import { connect } from '@nats-io/transport-node';
import { startNode } from '../../src/node.js';
import { LOG_SUBJECTS, STREAM } from '../../src/nats/subjects.js';
import { JobStore } from '../../src/store/job-store.js';
import { LogTail } from '../../src/store/log-tail.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { callNode, captureProjections, closeTestFile, lastSeq, loggerWatchingFor, openResources, startTrackedNode, startTwoNodes, uniqueQueue } from '../support/docket.js';

const MANUAL_CHECKS = { soloAfterMs: 0, checkEveryMs: 3_600_000 };

let server: TestNatsServer;
let a: DocketNode;
let b: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  ({ server, a, b, client, nc, jsm } = await startTwoNodes('tail', { tail: MANUAL_CHECKS }));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [a, b], server });
});

afterEach(() => {
  expect(openResources()).toHaveLength(2);
});

/** Runs the node's check until it has stopped following (everything applied, no other writer). */
async function goSolo(node: DocketNode): Promise<void> {
  await vi.waitFor(async () => {
    await node.tail.check();
    expect(node.tail.following).toBe(false);
  });
}

/** A job.submitted appended on the node's own append connection without telling its tail: no hint, no ack seen. */
async function appendUnannounced(node: DocketNode, queue: string, jobId: string): Promise<number> {
  const event = envelope(node.context, 'job.submitted', { queue, jobId }, `e${jobId}`, {
    job_id: jobId, key: null, params: {}, priority: 5, position: null, run_at: new Date().toISOString(),
    max_attempts: JobDefaults.maxAttempts, backoff: JobDefaults.backoff, attempt: 1, retry_of: null, waiting: false,
  });
  const partition = queuePartition(queue);
  const payload = encodeCommit({ commit: `hidden.${jobId}`, partition, writer: { node: node.name, epoch: 0 }, prev_hash: null, events: [event] });
  const { seq } = await node.events.append({ subject: subjects.partition(partition), payload, msgId: `hidden.${jobId}`, expectedSeq: 0 });
  return seq;
}

describe('the log tail while this node is the only writer', () => {
  test('stops following, and its own appends move the position to the end of the stream', async () => {
    const queue = uniqueQueue('solo own acks');
    await goSolo(a);
    await goSolo(b);
    const { jobs } = await callNode(a, 'submit', { jobs: Array.from({ length: 50 }, (_, i) => ({ queue, params: { i } })) }).then((r) => r as unknown as { jobs: { job_id: string }[] });
    await callNode(a, 'cancel', { job_id: jobs[0]!.job_id });
    expect(a.tail.following).toBe(false);
    expect(a.tail.position).toBe(await lastSeq(jsm));
    expect(a.store.get(jobs[0]!.job_id)?.state.job.value).toBe('cancelled');
  });

  test("another node's append is heard on the noEcho connection and folded without waiting", async () => {
    const queue = uniqueQueue('solo hint');
    await goSolo(a);
    await goSolo(b);
    const reply = await callNode(b, 'submit', { queue, params: { from: 'b' } });
    const jobId = (reply as unknown as { job_id: string }).job_id;
    // No check runs and nothing waits on a's tail: only the hint can bring the event to a.
    await vi.waitFor(() => expect(a.store.get(jobId)?.state.job.value).toBe('queued'), { timeout: 5_000 });
    expect(a.tail.position).toBeGreaterThanOrEqual(commitSeqOf(b.store.get(jobId)!.seq));
  });

  test('a gap before an own append (an event no hint announced) starts the consumer, which fills it', async () => {
    const queue = uniqueQueue('solo gap');
    await goSolo(a);
    const hidden = await appendUnannounced(a, queue, 'hiddengap0000000000000000000000001');
    expect(a.store.get('hiddengap0000000000000000000000001')).toBeUndefined();
    await callNode(a, 'submit', { queue, params: { after: hidden } });
    await vi.waitFor(() => expect(a.store.get('hiddengap0000000000000000000000001')?.seq).toBe(positionOf(hidden, 0)));
    expect(a.tail.following).toBe(true);
  });

  test('a wait for a sequence past the position starts the consumer, which brings it', async () => {
    const queue = uniqueQueue('solo wait');
    await goSolo(a);
    const hidden = await appendUnannounced(a, queue, 'hiddenwait000000000000000000000001');
    await a.tail.waitFor(hidden);
    expect(a.store.get('hiddenwait000000000000000000000001')?.seq).toBe(positionOf(hidden, 0));
    expect(a.tail.following).toBe(true);
  });

  test('going solo deletes the consumer on the server, and following creates one', async () => {
    const consumers = async () => (await jsm.consumers.list(STREAM).next()).length;
    await goSolo(a);
    await goSolo(b);
    const alone = await consumers();
    await a.tail.waitFor(await appendUnannounced(a, uniqueQueue('solo consumers'), 'hiddenconsumers0000000000000000001'));
    // a follows (it waited), and so does b: it heard a's publish.
    await vi.waitFor(async () => expect(await consumers()).toBe(alone + 2));
    await goSolo(a);
    await goSolo(b);
    expect(await consumers()).toBe(alone);
  });

  test('the stream staying ahead of the position for a check period starts the consumer', async () => {
    const queue = uniqueQueue('solo check');
    await goSolo(a);
    const hidden = await appendUnannounced(a, queue, 'hiddencheck00000000000000000000001');
    await a.tail.check(); // notes the stream's last sequence
    expect(a.tail.following).toBe(false);
    await a.tail.check(); // the position has not passed it: follow
    expect(a.tail.following).toBe(true);
    await vi.waitFor(() => expect(a.store.get('hiddencheck00000000000000000000001')?.seq).toBe(positionOf(hidden, 0)));
  });

  test('a node that starts while nobody else writes stops following once the log is folded, not a check period later', async () => {
    await callNode(b, 'submit', { queue: uniqueQueue('solo at start'), params: {} });
    const c = await startTrackedNode(server, { nodeName: 'tail-start', tail: MANUAL_CHECKS });
    try {
      await vi.waitFor(() => expect(c.tail.following).toBe(false));
      expect(c.tail.position).toBe(await lastSeq(jsm));
    } finally {
      await c.close();
    }
  });

  test("another node's event since start keeps a following tail following for soloAfterMs; the log's past does not", async () => {
    const queue = uniqueQueue('solo window');
    const window = { soloAfterMs: 60_000, checkEveryMs: 3_600_000 };
    const c = await startTrackedNode(server, { nodeName: 'tail-c', tail: window });
    let d: DocketNode | undefined;
    try {
      const reply = await callNode(b, 'submit', { queue, params: { after: 'c started' } });
      const jobId = (reply as unknown as { job_id: string }).job_id;
      await vi.waitFor(() => expect(c.store.get(jobId)?.state.job.value).toBe('queued'));
      await c.tail.check();
      expect(c.tail.following).toBe(true);
      // For a node started after it, the same event is the log's past.
      d = await startTrackedNode(server, { nodeName: 'tail-d', tail: window });
      expect(d.store.get(jobId)?.state.job.value).toBe('queued');
      await d.tail.check();
      expect(d.tail.following).toBe(false);
    } finally {
      await c.close();
      await d?.close();
    }
  });

  test('a solo node rides out a nats-server crash: its appends go on, and a writer after the restart is heard', async () => {
    const own = await startNatsServer();
    let restarted: TestNatsServer | undefined;
    const first = await startTrackedNode(own, { nodeName: 'tail-crash-1', tail: MANUAL_CHECKS });
    let second: DocketNode | undefined;
    try {
      const queue = uniqueQueue('solo crash');
      await goSolo(first);
      await callNode(first, 'submit', { queue, params: { n: 1 } });
      restarted = await own.restart();
      // The node reconnects by itself; until then a submit is unavailable (and appends nothing).
      const after = await vi.waitFor(async () => {
        const reply = await callNode(first, 'submit', { queue, params: { n: 2 } });
        if (!reply.ok) throw new Error(reply.error.code);
        return (reply as unknown as { job_id: string }).job_id;
      }, { timeout: 20_000, interval: 200 });
      expect(first.store.get(after)?.state.job.value).toBe('queued');
      // Still solo: the hint subscription came back with the connection.
      expect(first.tail.following).toBe(false);
      second = await startTrackedNode(restarted, { nodeName: 'tail-crash-2', tail: MANUAL_CHECKS });
      const reply = await callNode(second, 'submit', { queue, params: { n: 3 } });
      const fromSecond = (reply as unknown as { job_id: string }).job_id;
      await vi.waitFor(() => expect(first.store.get(fromSecond)?.state.job.value).toBe('queued'));
      expect(captureProjections(first, [queue])).toEqual(captureProjections(second, [queue]));
    } finally {
      await second?.close();
      await first.close();
      await (restarted ?? own).stop();
    }
  }, 60_000);

  test('a fold that looks ahead before its consumer delivers waits for it, never skips (also without direct get)', async () => {
    const own = await startNatsServer();
    const ownNc = await connect({ servers: own.url });
    try {
      // An operator-made DOCKET without allow_direct: docket uses it as it is.
      await (await jetstreamManager(ownNc)).streams.add({ name: STREAM, subjects: [LOG_SUBJECTS], storage: StorageType.File, allow_direct: false });
      const writer = await startTrackedNode(own, { nodeName: 'tail-lookahead-writer' });
      const queue = uniqueQueue('look ahead');
      try {
        for (let n = 0; n < 3; n++) expect((await callNode(writer, 'submit', { queue, params: { n } })).ok).toBe(true);
      } finally {
        await writer.close();
      }
      const end = (await (await jetstreamManager(ownNc)).streams.info(STREAM)).state.last_seq;
      const { logger, logged: lookAhead } = loggerWatchingFor(/still folding|cannot look ahead/);
      const store = new JobStore();
      const tail = new LogTail(ownNc, store, logger, 1);
      try {
        // Nothing folds until the consumer starts, so the look-ahead runs first.
        const folded = tail.waitForEnd(end);
        await Promise.race([lookAhead, folded]);
        await tail.start();
        await folded;
        expect(tail.position).toBe(end);
        expect([...store.values()].filter((r) => r.queue === queue)).toHaveLength(3);
      } finally {
        await tail.stop();
      }
    } finally {
      await ownNc.close();
      await own.stop();
    }
  });

  test('a consumer that nats.js gives up on is started again from the position', async () => {
    const never = { soloAfterMs: Number.POSITIVE_INFINITY, checkEveryMs: 3_600_000 };
    const c = await startTrackedNode(server, { nodeName: 'tail-ended', tail: never });
    try {
      // nats.js ends a consume for good on a 400 or after a long outage; stopping its iterator
      // stands in for that (the tail holds it privately).
      (c.tail as unknown as { messages: { stop(): void } }).messages.stop();
      const reply = await callNode(b, 'submit', { queue: uniqueQueue('consumer ended'), params: {} });
      const jobId = (reply as unknown as { job_id: string }).job_id;
      await vi.waitFor(() => expect(c.store.get(jobId)?.state.job.value).toBe('queued'), { timeout: 5_000 });
      expect(c.tail.following).toBe(true);
    } finally {
      await c.close();
    }
  });

  test('a given appendNc must be opened with noEcho (invalid_request), or the node would never go solo', async () => {
    const shared = await connect({ servers: server.url });
    const echoing = await connect({ servers: server.url });
    try {
      await expect(startNode({ nc: shared, appendNc: echoing })).rejects.toMatchObject({ code: 'invalid_request' });
    } finally {
      await shared.close();
      await echoing.close();
    }
  });

  test('after solo stretches on both nodes, both hold what a fresh replay of the stream holds', async () => {
    const queue = uniqueQueue('solo replay');
    for (let round = 0; round < 3; round++) {
      await goSolo(a);
      await goSolo(b);
      const one = await callNode(round % 2 === 0 ? a : b, 'submit', { queue, params: { round } });
      await callNode(round % 2 === 0 ? b : a, 'cancel', { job_id: (one as unknown as { job_id: string }).job_id });
    }
    const fresh = await startTrackedNode(server, { nodeName: 'tail-fresh' });
    try {
      const end = await lastSeq(jsm);
      await vi.waitFor(() => {
        expect(a.tail.position).toBe(end);
        expect(b.tail.position).toBe(end);
      });
      const live = captureProjections(fresh, [queue]);
      expect(captureProjections(a, [queue])).toEqual(live);
      expect(captureProjections(b, [queue])).toEqual(live);
      expect(live.progress[0]?.counts.cancelled).toBe(3);
    } finally {
      await fresh.close();
    }
  });
});
