/**
 * Embedded workers (README "Embedded workers"): a Worker given `local: node` runs in the node's
 * process. While that node leads the queue its claims and completions are served in process, so
 * no work request crosses NATS; when another node leads, they go over NATS like any worker's.
 * Either way the log is the same: every job ends once, no job has two open runs, the audit is clean.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { auditMessages } from '../../src/audit/audit.js';
import { LIVE_SEQ_HEADER, queuePartition, subjects } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { readLog } from '../../src/store/read-log.js';
import { closeTestFile, queueLog, startTwoNodes, uniqueQueue, type TwoNodes } from '../support/docket.js';
import { doubleOpenRuns, eventually, leadNow, maxOpenRuns, until } from '../support/worker-helpers.js';

let cluster: TwoNodes;
const workers = new Set<Worker>();

beforeAll(async () => {
  cluster = await startTwoNodes('embedded');
});

afterEach(async () => {
  for (const w of workers) await w.close();
  workers.clear();
});

afterAll(async () => {
  await closeTestFile({ client: cluster.client, nc: cluster.nc, nodes: [cluster.a, cluster.b], server: cluster.server });
});

/** Counts the work requests of `queue` that travel over NATS (claims, completions, heartbeats). */
async function countWorkRequests(nc: NatsConnection, queue: string): Promise<{ readonly count: () => number; readonly sub: Subscription }> {
  let seen = 0;
  const sub = nc.subscribe(`${subjects.work(queue, 'claim').split('.').slice(0, -1).join('.')}.>`, { callback: () => void (seen += 1) });
  await nc.flush();
  return { count: () => seen, sub };
}

function allSucceeded(ids: readonly string[]): (store: DocketNode['store']) => boolean {
  return (store) => ids.every((id) => store.get(id)?.state.job.value === 'succeeded');
}

/** `n` jobs with params {i} from `from` on. */
async function submit(queue: string, n: number, from = 0): Promise<string[]> {
  const { jobs } = await cluster.client.submitBatch(Array.from({ length: n }, (_, i) => ({ queue, params: { i: from + i } })));
  return jobs.map((j) => {
    if (!j.ok) throw new Error(`submit refused: ${JSON.stringify(j)}`);
    return j.job_id;
  });
}

describe('a Worker embedded in a node', () => {
  test('on the leader: runs every job once, at most `concurrency` handlers at a time (and as many jobs again claimed ahead), with no work request over NATS', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    // The queue's first submit makes one of the two nodes its leader; the worker is embedded there.
    const ids = await submit(queue, 1);
    const leader = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
    const requests = await countWorkRequests(cluster.nc, queue);
    let active = 0;
    let maxActive = 0;
    const results = new Map<string, number>();
    const worker = new Worker({
      local: leader,
      queue,
      concurrency: 4,
      handler: async (job, ctx) => {
        active += 1;
        maxActive = Math.max(maxActive, active);
        await new Promise((r) => setImmediate(r));
        active -= 1;
        results.set(job.job_id, ctx.fencingToken);
        return { doubled: (job.params['i'] as number) * 2 };
      },
    });
    workers.add(worker);
    await worker.start();
    ids.push(...(await submit(queue, 59, 1)));
    await until(leader, allSucceeded(ids), 'all sixty succeeded');
    await eventually(() => worker.counts.succeeded === 60, 'the worker counted sixty successes');
    requests.sub.unsubscribe();
    expect(requests.count()).toBe(0);
    expect(maxActive).toBeLessThanOrEqual(4);
    expect(results.size).toBe(60);
    const detail = await cluster.client.get(ids[7]!);
    expect(detail.run).toMatchObject({ status: 'completed', result: { doubled: 14 } });
    const log = await queueLog(cluster.nc, queue);
    // Runs are short here, so the worker claims ahead: its default prefetch is its concurrency.
    expect(maxOpenRuns(log)).toBeLessThanOrEqual(8);
    expect(doubleOpenRuns(log)).toEqual([]);
  });

  test('on a node that does not lead the queue: its requests go over NATS to the leader, and every job runs once', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submit(queue, 1);
    const leader = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
    const follower = leader === cluster.a ? cluster.b : cluster.a;
    const requests = await countWorkRequests(cluster.nc, queue);
    const worker = new Worker({ local: follower, queue, concurrency: 2, handler: () => null });
    workers.add(worker);
    await worker.start();
    ids.push(...(await submit(queue, 19, 1)));
    await until(leader, allSucceeded(ids), 'all twenty succeeded');
    requests.sub.unsubscribe();
    expect(follower.leadership.isLeader(queue)).toBe(false);
    expect(requests.count()).toBeGreaterThan(0);
    expect(doubleOpenRuns(await queueLog(cluster.nc, queue))).toEqual([]);
  });

  test('a handler that throws fails its run, as for a worker of its own', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const [id] = await submit(queue, 1);
    const leader = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
    const worker = new Worker({
      local: leader,
      queue,
      handler: () => {
        throw new Error('kaput');
      },
    });
    workers.add(worker);
    await worker.start();
    await until(leader, (store) => store.get(id!)?.state.job.value === 'failed', 'the job failed');
    const detail = await cluster.client.get(id!);
    expect(detail.run).toMatchObject({ status: 'failed', error: { message: 'kaput' } });
  });

  test('leadership moving while the embedded worker has requests in flight: every job ends once, no job has two open runs', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ids = await submit(queue, 1);
    const leader = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
    let handled = 0;
    const worker = new Worker({
      local: leader,
      queue,
      concurrency: 4,
      handler: async () => {
        handled += 1;
        await new Promise((r) => setTimeout(r, 10));
        return null;
      },
    });
    workers.add(worker);
    await worker.start();
    ids.push(...(await submit(queue, 79, 1)));
    // Mid-run the leader gives the queue up (as a deposed writer does): its writer closes, the
    // decisions in flight are answered `unavailable`, and the next requests find a leader again.
    await eventually(() => handled >= 10, 'ten jobs handled');
    await leader.leadership.relinquish(queue);
    expect(handled).toBeLessThan(60);
    const next = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
    await until(next, allSucceeded(ids), 'all eighty succeeded', 20_000);
    const log = await queueLog(cluster.nc, queue);
    expect(doubleOpenRuns(log)).toEqual([]);
    // Each job succeeded once.
    const succeeded = log.filter((e) => e.type === 'job.succeeded').map((e) => e.jobId);
    expect(new Set(succeeded).size).toBe(80);
    expect(succeeded).toHaveLength(80);
  });

  test('a Client given local: node has its commands answered in process, none over NATS, with the same replies and errors', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const local = await Client.connect({ local: cluster.a });
    let commandsOverNats = 0;
    const sub = cluster.nc.subscribe('docket.cmd.>', { callback: () => void (commandsOverNats += 1) });
    await cluster.nc.flush();
    try {
      const { job_id } = await local.submit({ queue, params: { n: 1 } });
      // Whichever node leads the queue: the node in this process routes it as for any request.
      const detail = await local.get(job_id);
      expect(detail.job).toMatchObject({ job_id, queue, status: 'queued', params: { n: 1 } });
      await expect(local.get('no-such-job')).rejects.toMatchObject({ code: 'not_found' });
      await expect(local.submit({ queue, priority: 999 })).rejects.toMatchObject({ code: 'invalid_request' });
      const worker = new Worker({ local: cluster.a, queue, handler: () => 'done' });
      workers.add(worker);
      await worker.start();
      const leader = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
      await until(leader, allSucceeded([job_id]), 'the job succeeded');
      await sub.drain();
      // A node that does not lead the queue forwards the submit to its leader on the leader's
      // inbox, not on docket.cmd.*: no command of this client crossed NATS as a command.
      expect(commandsOverNats).toBe(0);
    } finally {
      await local.close();
    }
  });

  test('a Client given local: node reads live() events of the queue its node leads from the node itself, and of a queue the other node leads over NATS; each event once, in order', async ({ task }) => {
    for (const side of ['leads', 'follows'] as const) {
      const queue = uniqueQueue(`${task.name}-${side}`);
      const [first] = await submit(queue, 1);
      const leader = await leadNow(cluster.nc, queue, [cluster.a, cluster.b]);
      const node = side === 'leads' ? leader : leader === cluster.a ? cluster.b : cluster.a;
      const handed: { partition: string; seq: number }[] = [];
      const unlisten = node.live.subscribe((partition, seq) => void (partition === queuePartition(queue) && handed.push({ partition, seq })));
      const local = await Client.connect({ local: node });
      // What reaches the connection the local client subscribes on over NATS: the other leader's
      // commits, never the node's own (nats-server does not echo them; they came in process).
      const overNats: number[] = [];
      const echo = node.live.nc.subscribe(subjects.live(queuePartition(queue)), { callback: (_err, m) => void overNats.push(Number(m.headers?.get(LIVE_SEQ_HEADER))) });
      const abort = new AbortController();
      // Where the client subscribes: on the connection the node publishes on, not its main one.
      const onLiveNc = vi.spyOn(node.live.nc, 'subscribe');
      const onMainNc = vi.spyOn(node.nc, 'subscribe');
      try {
        const live = local.live({ queue, signal: abort.signal });
        await live.ready;
        const liveSubject = subjects.liveQueues(queue);
        expect(onLiveNc.mock.calls.map(([subject]) => subject)).toContain(liveSubject);
        expect(onMainNc.mock.calls.map(([subject]) => subject)).not.toContain(liveSubject);
        await local.cancel(first!);
        const [second] = await submit(queue, 1, 1);
        await local.cancel(second!);
        const seen = [];
        for await (const event of live) {
          seen.push([event.type, event.aggregate.id, event.position.seq]);
          if (seen.length === 3) break;
        }
        const stored = (await queueLog(cluster.nc, queue)).slice(1);
        expect(seen).toEqual(stored.map((e) => [e.type, e.jobId, e.seq]));
        // The node hands over only the commits it writes, each once, when acknowledged.
        expect(handed.map((h) => h.seq)).toEqual(side === 'leads' ? stored.map((e) => e.seq) : []);
        await node.live.nc.flush();
        expect(overNats).toEqual(side === 'leads' ? [] : stored.map((e) => e.seq));
      } finally {
        onLiveNc.mockRestore();
        onMainNc.mockRestore();
        echo.unsubscribe();
        abort.abort();
        unlisten();
        await local.close();
      }
    }
  });

  test('everything this file appended passes docket audit (runs this file\'s tests first)', async () => {
    const messages = [];
    for await (const m of readLog(cluster.nc)) messages.push(m);
    const audit = auditMessages(messages);
    expect(audit.jobEvents).toBeGreaterThan(100);
    expect(audit.violations).toEqual([]);
  });
});
