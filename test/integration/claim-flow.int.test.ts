/**
 * The worker protocol over NATS, against a real nats-server (issue 3): claims in exact queue
 * order, the long poll, delayed jobs, move, leases (heartbeat, lapse), fencing (stale_run, nothing
 * appended), idempotent completions, cancel of a running job, retries as new jobs with derived
 * ids, and recovery by replay (crash_recovery leases, missing retries).
 *
 * One server and one node for the file, on a ManualClock: lapses and delays happen when a test
 * advances the clock, never by sleeping. Each test takes its own queue and leaves no run open
 * (checked after each test), so a clock move in one test lapses nothing of another's.
 */
import { queuePartition } from '../../src/nats/subjects.js';
import { positionOf } from '../../machines/index.js';
import { PartitionWriter, readPartitionTip } from '../../src/store/partition-writer.js';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import type { JetStreamManager } from '@nats-io/jetstream';
import { Client } from '../../src/client/client.js';
import type { ClaimedJob } from '../../src/commands/schemas.js';
import { ManualClock, toIso } from '../../src/clock.js';
import { envelope, transitionJob } from '../../src/commands/handle-command.js';
import { retryJobId } from '../../src/ids.js';
import { backoffDelayMs } from '../../machines/index.js';
import { subjects } from '../../src/nats/subjects.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { auditMessages } from '../../src/audit/audit.js';
import { readLog } from '../../src/store/read-log.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { callNode, caughtUp, commitAsDeposed, openResources, queueLog, startTrackedNode, streamMessages, uniqueQueue, closeTestFile, connectTestClients } from '../support/docket.js';
import {
  claim,
  complete,
  doubleOpenRuns,
  fail,
  fence,
  heartbeat,
  leadNow,
  nextEvent,
  ok,
  parkedClaims,
  timed,
  untilJob,
  untilParked,
  untilRetryOf,
  work,
  type WorkReply,
} from '../support/worker-helpers.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-04-01T08:00:00.000Z'));
let nodeSerial = 0;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startFileNode();
  ({ client, nc, jsm } = await connectTestClients(server, 'claim-flow-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(() => {
  // Leak checks: only the file's node is open, and no test left a run holding a lease.
  expect(openResources()).toHaveLength(1);
  expect(node.leases.size).toBe(0);
});

/** Starts a node on the file's server and clock (serving as soon as it resolves: see 'start-up'). */
function startFileNode(options: { leadershipLeaseMs?: number } = {}): Promise<DocketNode> {
  return startTrackedNode(server, { clock, nodeName: `claims-${++nodeSerial}`, ...options });
}

/** Closes the node (a clean stop) and starts a new one on the same stream and clock. */
async function restartNode(): Promise<void> {
  await node.close();
  node = await startFileNode();
}

async function submit(queue: string, spec: Record<string, unknown> = {}): Promise<string> {
  const reply = await client.submit({ queue, ...spec } as Parameters<Client['submit']>[0]);
  expect(reply.created).toBe(true);
  return reply.job_id;
}

async function refusal(p: Promise<{ ok: boolean; error?: { code: string } }>): Promise<string> {
  const reply = await p;
  if (reply.ok) throw new Error(`expected a refusal, got ${JSON.stringify(reply)}`);
  return reply.error!.code;
}

/** Completes every claimed job (cleanup, so no lease outlives its test). */
async function completeAll(queue: string, jobs: readonly { job_id: string; run_id: string }[]): Promise<void> {
  for (const job of jobs) expect((await complete(nc, queue, job)).ok).toBe(true);
}

describe('claim order', () => {
  test('claims come out in exact queue order (priority, then submit order), max at a time', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const priorities = [5, 3, 5, 0, 3, 9, 5, 0];
    const ids: string[] = [];
    for (const [i, priority] of priorities.entries()) ids.push(await submit(queue, { priority, params: { i }, max_attempts: 2 }));
    const expected = ids.map((id, i) => ({ id, priority: priorities[i]!, i })).sort((a, b) => a.priority - b.priority || a.i - b.i).map((e) => e.id);
    expect(node.queueOrder.snapshot(queue).ready).toEqual(expected);

    const first = await claim(nc, queue, { max: 3, lease_ms: 60_000 });
    const second = await claim(nc, queue, { max: 3, lease_ms: 60_000 });
    const rest = await claim(nc, queue, { max: 10, lease_ms: 60_000 });
    expect(await claim(nc, queue, { max: 10 })).toEqual([]);
    expect(first.map((j) => j.job_id)).toEqual(expected.slice(0, 3));
    expect(second.map((j) => j.job_id)).toEqual(expected.slice(3, 6));
    expect(rest.map((j) => j.job_id)).toEqual(expected.slice(6));

    // Each claim carries what a worker needs, and one job.claimed opened each run.
    const head = first[0]!;
    expect(head).toEqual({ job_id: ids[3], run_id: expect.any(String), queue, key: null, params: { i: 3 }, attempt: 1, max_attempts: 2, lease_ms: 60_000, fencing_token: expect.any(Number) });
    const claimed = [...first, ...second, ...rest];
    expect(new Set(claimed.map((j) => j.run_id)).size).toBe(8);
    const log = await queueLog(nc, queue);
    const claimEvents = log.filter((e) => e.type === 'job.claimed');
    expect(claimEvents.map((e) => e.data['run_id'])).toEqual(claimed.map((j) => j.run_id));
    // Each run's fencing token is its claim's position in the log: strictly increasing.
    expect(claimed.map((j) => j.fencing_token)).toEqual(claimEvents.map((e) => positionOf(e.seq, e.index)));
    expect(claimed.map((j) => j.fencing_token)).toEqual([...claimed.map((j) => j.fencing_token)].sort((a, b) => a - b));
    expect(claimEvents[0]!.data).toMatchObject({ worker: 'test-worker', lease_ms: 60_000 });
    const detail = await client.get(head.job_id);
    expect(detail.job.status).toBe('running');
    expect(detail.run).toMatchObject({ status: 'running', run_id: head.run_id, worker: 'test-worker', started_at: toIso(clock.now()) });

    await completeAll(queue, claimed);
  });

  test('a claim with no max takes one job; two parked claims are served oldest first', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const a = await submit(queue);
    const b = await submit(queue);
    const one = await claim(nc, queue);
    expect(one.map((j) => j.job_id)).toEqual([a]);
    const two = await claim(nc, queue);
    expect(two.map((j) => j.job_id)).toEqual([b]);

    // Two long polls parked in order; two jobs arrive: the older poll gets the first job.
    const older = claim(nc, queue, { worker: 'older', wait_ms: 20_000 });
    await untilParked(node, queue, 1);
    const newer = claim(nc, queue, { worker: 'newer', wait_ms: 20_000 });
    await untilParked(node, queue, 2);
    const c = await submit(queue);
    const d = await submit(queue);
    expect((await older).map((j) => j.job_id)).toEqual([c]);
    expect((await newer).map((j) => j.job_id)).toEqual([d]);
    await completeAll(queue, [...one, ...two, ...(await older), ...(await newer)]);
  });

  test('a parked claim takes a job submitted to its queue in the submit\'s own commit, in queue order, within its max', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const parked = claim(nc, queue, { worker: 'parked', wait_ms: 20_000, max: 2 });
    await untilParked(node, queue, 1);
    // One batch of three: the best two by priority go to the parked claim, the third stays queued.
    const { jobs } = await client.submitBatch([
      { queue, params: { n: 1 }, priority: 7 },
      { queue, params: { n: 2 }, priority: 1 },
      { queue, params: { n: 3 }, priority: 3 },
    ]);
    const ids = jobs.map((j) => (j.ok ? j.job_id : ''));
    const taken = await parked;
    expect(taken.map((j) => j.job_id)).toEqual([ids[1], ids[2]]);
    const log = await queueLog(nc, queue);
    for (const job of taken) {
      const submitted = log.find((e) => e.jobId === job.job_id && e.type === 'job.submitted')!;
      const claimed = log.find((e) => e.jobId === job.job_id && e.type === 'job.claimed')!;
      // One commit, the claim right after its submit; the fencing token is the claim's position.
      expect(claimed.seq).toBe(submitted.seq);
      expect(claimed.index).toBe(submitted.index + 1);
      expect(job.fencing_token).toBe(positionOf(claimed.seq, claimed.index));
      expect(claimed.data).toMatchObject({ worker: 'parked', run_id: job.run_id });
    }
    expect((await client.get(ids[0]!)).job.status).toBe('queued');
    const rest = await claim(nc, queue);
    expect(rest.map((j) => j.job_id)).toEqual([ids[0]]);
    await completeAll(queue, [...taken, ...rest]);
  });

  test('a parked claim with max_priority is not handed a less urgent job as it is submitted', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const parked = claim(nc, queue, { worker: 'urgent-only', wait_ms: 20_000, max_priority: 3 });
    await untilParked(node, queue, 1);
    const lax = await submit(queue, { priority: 7 });
    // Answered at once with nothing (it would only block the claims behind it), the job left queued.
    expect(await parked).toEqual([]);
    expect((await client.get(lax)).job.status).toBe('queued');
    const rest = await claim(nc, queue);
    expect(rest.map((j) => j.job_id)).toEqual([lax]);
    await completeAll(queue, rest);
  });
});

describe('claim requests', () => {
  test('the claim records worker, host, pid, version and lease on the run', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue, { key: { subject: 7 }, params: { a: [1, 2] } });
    const reply = await work<{ jobs: { job_id: string; run_id: string; key: unknown; params: unknown }[] }>(nc, queue, 'claim', { worker: 'w-meta', host: 'box-1', pid: 4242, version: 'v1.2.3', lease_ms: 45_000, wait_ms: 0 });
    if (!reply.ok) throw new Error(reply.error.message);
    const [job] = reply.jobs;
    expect(job).toMatchObject({ job_id: jobId, key: { subject: 7 }, params: { a: [1, 2] } });
    expect((await client.get(jobId)).run).toMatchObject({ status: 'running', run_id: job!.run_id, worker: 'w-meta', host: 'box-1', pid: 4242, version: 'v1.2.3', lease_ms: 45_000 });
    await completeAll(queue, [job!]);
  });

  test('bad claims, heartbeats and completions are refused with invalid_request and append nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue);
    const before = await streamMessages(jsm);
    const bad: [Parameters<typeof work>[2], unknown][] = [
      ['claim', {}], // no worker
      ['claim', { worker: 'w', max: 0 }],
      ['claim', { worker: 'w', lease_ms: 10 }], // below the minimum lease
      ['claim', { worker: 'w', wait_ms: -1 }],
      ['claim', { worker: 'w', surprise: true }],
      ['heartbeat', { run_ids: 'r1' }],
      ['complete', { run_id: 'r1' }],
      ['fail', { run_id: 'r1', job_id: 'j1', error: 'boom' }],
    ];
    for (const [verb, body] of bad) {
      const reply = await work(nc, queue, verb, body);
      expect(reply, `${verb} ${JSON.stringify(body)}`).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    }
    const raw = await nc.request(subjects.work(queue, 'claim'), 'not json', { timeout: 5_000 });
    expect(raw.json()).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    expect(await streamMessages(jsm)).toBe(before);
    expect(node.queueOrder.depth(queue)).toBe(1);
    const [job] = await claim(nc, queue);
    await completeAll(queue, [job!]);
  });

  test('an unknown work verb is refused with invalid_request, not unavailable (which a client retries forever)', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const typo = await nc.request(`docket.work.${queue}.claims`, JSON.stringify({ worker: 'w' }), { timeout: 5_000 });
    expect(typo.json()).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
  });

  test('two writers of one partition (split brain): one commit per race is stored, the earlier epoch steps down, one run opens per job', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const other = await startFileNode();
    try {
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push(await submit(queue));
      await caughtUp(other, jsm);
      await caughtUp(node, jsm);
      const [leader, deposed] = node.leadership.isLeader(queue) ? [node, other] : [other, node];
      expect(leader.leadership.isLeader(queue)).toBe(true);
      // The other node leads too, under a later epoch (it took the lease; the leader has not
      // heard yet): a writer of its own on the same partition, from the same tip.
      const partition = queuePartition(queue);
      const tip = await readPartitionTip(jsm, partition);
      const rogue = new PartitionWriter(deposed.nc, deposed.events, {
        partition, node: deposed.name, epoch: leader.leadership.epochOf(queue) + 1, tip, onCommitted: () => undefined, refoldTo: (seq) => deposed.tail.waitFor(seq), log: deposed.log,
      });
      const claimEvent = (n: DocketNode, jobId: string) =>
        envelope(n.context, 'job.claimed', { queue, jobId }, `e${n.name}${jobId}`, { run_id: `${n.name}-${jobId.slice(0, 8)}`, worker: n.name, host: 'h', pid: 1, version: 'v', lease_ms: 60_000 });
      const winners: { job_id: string; run_id: string }[] = [];
      for (const jobId of ids) {
        const [a, b] = await Promise.allSettled([
          transitionJob(leader.context, jobId, undefined, () => claimEvent(leader, jobId)),
          rogue.append([claimEvent(deposed, jobId)]),
        ]);
        // Both decided the same claim from the same tip: the stream stores one commit, and the
        // other writer is refused (`unavailable`, after reading the foreign tip), never both.
        const won = [a, b].filter((r) => r.status === 'fulfilled');
        const lost = [a, b].filter((r): r is PromiseRejectedResult => r.status === 'rejected');
        expect(won).toHaveLength(1);
        expect(lost).toHaveLength(1);
        expect(lost[0]!.reason).toMatchObject({ code: 'unavailable' });
        await caughtUp(node, jsm);
        const record = node.store.get(jobId)!;
        expect(record.state.run.value).toBe('running');
        winners.push({ job_id: jobId, run_id: record.state.run.context.run_id! });
      }
      rogue.close(new Error('test over'));
      // Once the later writer's commit was seen, the leader stepped down; it leads again (a new
      // lease, a later epoch) on the next request, folded to the tip first.
      await leadNow(nc, queue, [node, other]);
      // Leadership may still move once (both nodes compete for the freed lease): `unavailable`
      // says retry, as the SDK does.
      for (const job of winners) {
        await vi.waitFor(async () => expect((await complete(nc, queue, job)).ok).toBe(true), { timeout: 15_000, interval: 100 });
      }
      winners.length = 0;
      const log = await queueLog(nc, queue);
      expect(log.filter((e) => e.type === 'job.claimed')).toHaveLength(10);
      expect(doubleOpenRuns(log)).toEqual([]);
      await completeAll(queue, winners);
    } finally {
      await other.close();
    }
  });
});

describe('long poll', () => {
  test('answers the moment a job is submitted, not at wait_ms nor at the poll fallback', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    // The first request makes this node lead the queue; the claim then parks.
    const pending = claim(nc, queue, { wait_ms: 20_000, lease_ms: 60_000 });
    await untilParked(node, queue);
    const { value: jobId, ms: submitMs } = await timed(submit(queue));
    const { value: jobs, ms } = await timed(pending);
    expect(jobs.map((j) => j.job_id)).toEqual([jobId]);
    // Measured from the submit's reply; the dispatcher's poll fallback is 1 s.
    expect(ms).toBeLessThan(500);
    expect(submitMs).toBeLessThan(1000);
    await completeAll(queue, jobs);
  });

  test('the parked claim\'s reply leaves the node ahead of the live commit that holds its job.claimed', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    // One connection gets both, so nats-server hands them over in the order the node published
    // them: a worker in the process of the job's watcher reads its job first.
    const watch = await connect({ servers: server.url });
    try {
      const arrived: string[] = [];
      let replied!: (reply: WorkReply<{ jobs: ClaimedJob[] }>) => void;
      const reply = new Promise<WorkReply<{ jobs: ClaimedJob[] }>>((resolve) => (replied = resolve));
      watch.subscribe(subjects.live(queuePartition(queue)), {
        callback: (_err, msg) => {
          if (msg.string().includes('"job.claimed"')) arrived.push('live job.claimed');
        },
      });
      watch.subscribe(`${task.id}.reply`, {
        callback: (_err, msg) => {
          arrived.push('claim reply');
          replied(msg.json<WorkReply<{ jobs: ClaimedJob[] }>>());
        },
      });
      watch.publish(subjects.work(queue, 'claim'), JSON.stringify({ worker: 'first-reader', wait_ms: 20_000 }), { reply: `${task.id}.reply` });
      await untilParked(node, queue);
      const jobId = await submit(queue);
      const { jobs } = ok(await reply);
      expect(jobs.map((j) => j.job_id)).toEqual([jobId]);
      await vi.waitFor(() => expect(arrived).toEqual(['claim reply', 'live job.claimed']));
      await completeAll(queue, jobs);
    } finally {
      await watch.close();
    }
  });

  test('a long poll with room for more answers with what is ready now, not when max is reached', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const a = await submit(queue);
    const b = await submit(queue);
    const { value: jobs, ms } = await timed(claim(nc, queue, { max: 5, wait_ms: 20_000 }));
    expect(jobs.map((j) => j.job_id)).toEqual([a, b]);
    expect(ms).toBeLessThan(1_000);
    await completeAll(queue, jobs);
  });

  test('returns no jobs after wait_ms when nothing comes', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const { value: jobs, ms } = await timed(claim(nc, queue, { wait_ms: 400 }));
    expect(jobs).toEqual([]);
    expect(ms).toBeGreaterThanOrEqual(395);
    expect(ms).toBeLessThan(3_000);
  });
});

describe('delayed jobs', () => {
  test('promote makes a delayed job due now, in its place; a job already due, or running, is refused and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const later = await submit(queue, { delay_ms: 60_000 });
    const due = await submit(queue);
    const [first] = await claim(nc, queue, { max: 10, wait_ms: 0 });
    expect(first).toMatchObject({ job_id: due });
    const promoted = await client.promote(later);
    expect(promoted).toEqual({ job_id: later, status: 'queued', run_at: toIso(clock.now()) });
    const [job] = await claim(nc, queue, { max: 10, wait_ms: 0 });
    expect(job).toMatchObject({ job_id: later });
    const before = await streamMessages(jsm);
    await expect(client.promote(due)).rejects.toMatchObject({ code: 'invalid_transition' });
    const fresh = await submit(queue);
    await expect(client.promote(fresh)).rejects.toMatchObject({ code: 'invalid_transition', message: expect.stringContaining('already due') });
    expect(await streamMessages(jsm)).toBe(before + 1);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.moved').map((e) => e.data)).toEqual([{ priority: 5, position: null, run_at: toIso(clock.now()) }]);
    const [last] = await claim(nc, queue, { max: 10, wait_ms: 0 });
    await completeAll(queue, [first!, job!, last!]);
  });

  test('a delayed job is not claimable before run_at and is claimable once the clock reaches it', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const t0 = clock.now();
    const late = await submit(queue, { delay_ms: 5_000 });
    const soon = await submit(queue, { delay_ms: 2_000 });
    const now = await submit(queue, { priority: 9 });
    expect((await client.get(late)).job.run_at).toBe(toIso(t0 + 5_000));

    const first = await claim(nc, queue, { max: 10 });
    expect(first.map((j) => j.job_id)).toEqual([now]);

    // A long poll parked before the job is due answers when the clock moves, not later.
    const pending = claim(nc, queue, { max: 10, wait_ms: 20_000 });
    await untilParked(node, queue);
    clock.advance(2_000);
    const { value: second, ms } = await timed(pending);
    expect(second.map((j) => j.job_id)).toEqual([soon]);
    expect(ms).toBeLessThan(900);

    clock.advance(2_999);
    expect(await claim(nc, queue, { max: 10 })).toEqual([]);
    clock.advance(1);
    const third = await claim(nc, queue, { max: 10 });
    expect(third.map((j) => j.job_id)).toEqual([late]);
    const claimedAt = (await queueLog(nc, queue)).filter((e) => e.type === 'job.claimed' && e.subject.endsWith(late));
    expect(claimedAt).toHaveLength(1);
    await completeAll(queue, [...first, ...second, ...third]);
  });

  test('a delayed job that comes due takes its place by priority among the ready ones', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ready = await submit(queue, { priority: 5 });
    const urgentLater = await submit(queue, { priority: 0, delay_ms: 1_000 });
    clock.advance(1_000);
    const jobs = await claim(nc, queue, { max: 2 });
    expect(jobs.map((j) => j.job_id)).toEqual([urgentLater, ready]);
    await completeAll(queue, jobs);
  });
});

describe('move', () => {
  test('move before/after/priority changes the claim order', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const [j1, j2, j3, j4] = [await submit(queue), await submit(queue), await submit(queue), await submit(queue)] as [string, string, string, string];
    await client.request('move', { job_id: j4, before: j1 });
    expect(node.queueOrder.snapshot(queue).ready).toEqual([j4, j1, j2, j3]);
    await client.request('move', { job_id: j1, after: j3 });
    expect(node.queueOrder.snapshot(queue).ready).toEqual([j4, j2, j3, j1]);
    const moved = await client.request<{ priority: number }>('move', { job_id: j2, priority: 0 });
    expect(moved.priority).toBe(0);
    expect(node.queueOrder.snapshot(queue).ready).toEqual([j2, j4, j3, j1]);
    // Before a job of another priority: the moved job takes that priority.
    await client.request('move', { job_id: j3, before: j2 });
    expect(node.queueOrder.snapshot(queue).ready).toEqual([j3, j2, j4, j1]);
    expect((await client.get(j3)).job.priority).toBe(0);

    const jobs = await claim(nc, queue, { max: 2 });
    expect(jobs.map((j) => j.job_id)).toEqual([j3, j2]);
    // A running job cannot be moved, nor can a job be moved relative to a running one or itself.
    await expect(client.request('move', { job_id: j3, priority: 1 })).rejects.toMatchObject({ code: 'invalid_transition' });
    await expect(client.request('move', { job_id: j1, before: j3 })).rejects.toMatchObject({ code: 'invalid_transition' });
    await expect(client.request('move', { job_id: j1, before: j1 })).rejects.toMatchObject({ code: 'invalid_request' });
    const last = await claim(nc, queue, { max: 5 });
    expect(last.map((j) => j.job_id)).toEqual([j4, j1]);
    await completeAll(queue, [...jobs, ...last]);
  });
});

describe('leases', () => {
  test('a heartbeat extends the lease: it lapses lease_ms after the last heartbeat, not after the claim', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    const [job] = await claim(nc, queue, { lease_ms: 1_000 });
    const claimedAt = clock.now();
    const from = (await streamMessages(jsm)) + 1;
    clock.advance(800);
    expect(await heartbeat(nc, queue, [job!.run_id])).toEqual([]);
    const beatAt = clock.now();
    clock.advance(800); // 1600 ms after the claim, 800 after the heartbeat
    expect((await client.get(jobId)).job.status).toBe('running');
    clock.advance(200); // 1000 ms after the heartbeat
    const lapse = await nextEvent(client, queue, from, (e) => e.event.type === 'job.failed', 'the lapse');
    // The lapse was decided at the last advance: none happened at claim + lease_ms.
    expect(lapse.event.time).toBe(toIso(beatAt + 1_000));
    expect(lapse.event.time).not.toBe(toIso(claimedAt + 1_000));
    expect(lapse.event.data).toMatchObject({ run_id: job!.run_id, reason: 'lease_expired', error: { message: expect.any(String) } });
    await untilJob(node, jobId, (r) => r.state.job.value === 'failed', 'failed by lapse');
    // The run no longer holds its job: its heartbeat says so.
    expect(await heartbeat(nc, queue, [job!.run_id])).toEqual([job!.run_id]);
  });

  test('a lapse fails the job with lease_expired at exactly claim + lease_ms', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    const [job] = await claim(nc, queue, { lease_ms: 1_500 });
    const from = (await streamMessages(jsm)) + 1;
    clock.advance(1_499);
    await fence(node);
    expect((await client.get(jobId)).job.status).toBe('running');
    clock.advance(1);
    const lapse = await nextEvent(client, queue, from, (e) => e.event.type === 'job.failed', 'the lapse');
    expect(lapse.event.data).toMatchObject({ run_id: job!.run_id, reason: 'lease_expired' });
    const detail = (await untilJob(node, jobId, (r) => r.state.job.value === 'failed', 'failed')).state;
    expect(detail.run.value).toBe('failed');
    expect(detail.run.context.failure_reason).toBe('lease_expired');
    expect(detail.job.context.end_reason).toBe('lease_expired');
  });

  test('a stale completion (after the lapse) is refused with stale_run and nothing is appended', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    const [job] = await claim(nc, queue, { lease_ms: 1_000 });
    clock.advance(1_000);
    await untilJob(node, jobId, (r) => r.state.job.value === 'failed', 'failed by lapse');
    await caughtUp(node, jsm);
    const before = await streamMessages(jsm);
    expect(await refusal(complete(nc, queue, job!, { late: true }))).toBe('stale_run');
    expect(await refusal(fail(nc, queue, job!))).toBe('stale_run');
    expect(await streamMessages(jsm)).toBe(before);
    const log = await queueLog(nc, queue);
    expect(log.map((e) => e.type)).toEqual(['job.submitted', 'job.claimed', 'job.failed']);
  });

  test('a completion naming a run that never held the job is stale_run; an unknown job is not_found', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    const [job] = await claim(nc, queue);
    const before = await streamMessages(jsm);
    expect(await refusal(complete(nc, queue, { job_id: jobId, run_id: 'not-the-run' }))).toBe('stale_run');
    expect(await refusal(complete(nc, queue, { job_id: 'no-such-job', run_id: job!.run_id }))).toBe('not_found');
    expect(await streamMessages(jsm)).toBe(before);
    await completeAll(queue, [job!]);
  });

  test('a completion sent on another queue\'s subject is refused and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const other = uniqueQueue(`${task.name}-other`);
    await submit(queue);
    const [job] = await claim(nc, queue);
    const before = await streamMessages(jsm);
    // The work subject names the queue whose leader serves it; a job of another queue is not
    // that leader's to complete (its leader may be another node, with its own leases).
    const reply = await complete(nc, other, job!);
    expect(reply.ok).toBe(false);
    expect(await streamMessages(jsm)).toBe(before);
    if (reply.ok) return; // the bug: it was appended; the lease was cleaned up with the run
    await completeAll(queue, [job!]);
  });
});

describe('a completion carrying the next claim', () => {
  test('complete and fail with next answer with the next jobs in queue order; next never waits', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const low = await submit(queue, { priority: 9 });
    const high = await submit(queue, { priority: 1 });
    const mid = await submit(queue, { priority: 5 });
    const [first] = await claim(nc, queue);
    expect(first!.job_id).toBe(high);
    const done = await work<{ job_id: string; status: string; jobs: { job_id: string; run_id: string; lease_ms: number }[] }>(nc, queue, 'complete', {
      job_id: first!.job_id,
      run_id: first!.run_id,
      result: null,
      next: { worker: 'next-worker', max: 1, lease_ms: 5_000 },
    });
    expect(done).toMatchObject({ ok: true, job_id: high, status: 'succeeded', jobs: [{ job_id: mid, lease_ms: 5_000 }] });
    const second = (done as { jobs: { job_id: string; run_id: string }[] }).jobs[0]!;
    expect((await client.get(mid)).run).toMatchObject({ status: 'running', worker: 'next-worker', run_id: second.run_id });

    const failed = await work<{ jobs: { job_id: string; run_id: string }[] }>(nc, queue, 'fail', {
      job_id: second.job_id,
      run_id: second.run_id,
      error: { message: 'boom' },
      next: { worker: 'next-worker', max: 5 },
    });
    expect(failed).toMatchObject({ ok: true, status: 'failed', jobs: [{ job_id: low }] });
    const third = (failed as { jobs: { job_id: string; run_id: string }[] }).jobs[0]!;
    // Nothing left: the next claim answers at once with no jobs (it does not long-poll).
    const t0 = Date.now();
    const last = await work(nc, queue, 'complete', { job_id: third.job_id, run_id: third.run_id, next: { worker: 'next-worker' } });
    expect(last).toMatchObject({ ok: true, status: 'succeeded', jobs: [] });
    expect(Date.now() - t0).toBeLessThan(1_000);
    // Without next, the reply is as before: no jobs field.
    const plain = await submit(queue);
    const [job] = await claim(nc, queue);
    expect(await complete(nc, queue, job!)).toEqual({ ok: true, job_id: plain, status: 'succeeded' });
  });

  test('a refused completion claims nothing, and parks no waiting claim; next with a wait_ms out of range is invalid_request; both append nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue);
    const waiting = await submit(queue);
    const [job] = await claim(nc, queue);
    const before = await streamMessages(jsm);
    expect(await refusal(work(nc, queue, 'complete', { job_id: job!.job_id, run_id: 'not-the-run', next: { worker: 'w' } }))).toBe('stale_run');
    expect(await refusal(work(nc, queue, 'complete', { job_id: job!.job_id, run_id: 'not-the-run', next: { worker: 'w', wait_ms: 20_000 } }))).toBe('stale_run');
    expect(parkedClaims(node, queue)).toBe(0);
    expect(await refusal(work(nc, queue, 'complete', { job_id: job!.job_id, run_id: job!.run_id, next: { worker: 'w', wait_ms: -1 } }))).toBe('invalid_request');
    expect(await refusal(work(nc, queue, 'complete', { job_id: job!.job_id, run_id: job!.run_id, next: { worker: 'w', wait_ms: 600_000 } }))).toBe('invalid_request');
    expect(await streamMessages(jsm)).toBe(before);
    expect((await client.get(waiting)).job.status).toBe('queued');
    await completeAll(queue, [job!]);
    const [rest] = await claim(nc, queue);
    await completeAll(queue, [rest!]);
  });
});

describe('a completion whose next claim waits (next.wait_ms)', () => {
  test('parked once the completion is committed; a job submitted then is claimed in its submit\'s own commit and comes back in the completion\'s reply', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submit(queue);
    const [job] = await claim(nc, queue);
    const reply = work<{ job_id: string; status: string; jobs: ClaimedJob[] }>(nc, queue, 'complete', {
      job_id: job!.job_id,
      run_id: job!.run_id,
      result: { n: 1 },
      next: { worker: 'waiting-next', wait_ms: 20_000, lease_ms: 7_000 },
    });
    // Nothing is ready: the claim parks, and the completion is committed before its reply (which waits).
    await untilParked(node, queue, 1);
    expect((await client.get(first)).job.status).toBe('succeeded');
    const second = await submit(queue);
    const done = await reply;
    expect(done).toMatchObject({ ok: true, job_id: first, status: 'succeeded', jobs: [{ job_id: second, lease_ms: 7_000 }] });
    const taken = (done as { jobs: ClaimedJob[] }).jobs[0]!;
    const log = await queueLog(nc, queue);
    const submitted = log.find((e) => e.jobId === second && e.type === 'job.submitted')!;
    const claimed = log.find((e) => e.jobId === second && e.type === 'job.claimed')!;
    const succeeded = log.find((e) => e.jobId === first && e.type === 'job.succeeded')!;
    // The claim joined the submit's commit (the hand-off), a later one than the completion's.
    expect(claimed.seq).toBe(submitted.seq);
    expect(claimed.seq).toBeGreaterThan(succeeded.seq);
    expect(taken.fencing_token).toBe(positionOf(claimed.seq, claimed.index));
    expect(claimed.data).toMatchObject({ worker: 'waiting-next', run_id: taken.run_id, lease_ms: 7_000 });
    await completeAll(queue, [taken]);
  });

  test('a job ready at the completion is taken in the completion\'s commit, without waiting; with nothing coming the reply waits wait_ms and has no jobs', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue);
    const queued = await submit(queue);
    const [job] = await claim(nc, queue);
    const { value: done, ms } = await timed(work<{ jobs: ClaimedJob[] }>(nc, queue, 'complete', { job_id: job!.job_id, run_id: job!.run_id, next: { worker: 'w', wait_ms: 20_000 } }));
    expect(done).toMatchObject({ ok: true, status: 'succeeded', jobs: [{ job_id: queued }] });
    expect(ms).toBeLessThan(5_000);
    const log = await queueLog(nc, queue);
    expect(log.find((e) => e.jobId === queued && e.type === 'job.claimed')!.seq).toBe(log.find((e) => e.jobId === job!.job_id && e.type === 'job.succeeded')!.seq);
    const next = (done as { jobs: ClaimedJob[] }).jobs[0]!;
    const waited = await timed(work<{ jobs: ClaimedJob[] }>(nc, queue, 'fail', { job_id: next.job_id, run_id: next.run_id, error: { message: 'boom' }, next: { worker: 'w', wait_ms: 300 } }));
    expect(waited.value).toMatchObject({ ok: true, status: 'failed', jobs: [] });
    expect(waited.ms).toBeGreaterThanOrEqual(250);
    expect(parkedClaims(node, queue)).toBe(0);
  });

  test('a batch completion\'s waiting next claim is parked for the slots it frees and answered with the runs', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue);
    await submit(queue);
    const jobs = await claim(nc, queue, { max: 2 });
    expect(jobs).toHaveLength(2);
    const reply = work<{ runs: { ok: boolean; status: string }[]; jobs: ClaimedJob[] }>(nc, queue, 'complete', {
      runs: jobs.map((j) => ({ job_id: j.job_id, run_id: j.run_id })),
      next: { worker: 'w', max: 2, wait_ms: 20_000 },
    });
    await untilParked(node, queue, 1);
    const { jobs: submitted } = await client.submitBatch([{ queue }, { queue }, { queue }]);
    const done = await reply;
    expect(done).toMatchObject({ ok: true, runs: [{ ok: true, status: 'succeeded' }, { ok: true, status: 'succeeded' }] });
    const taken = (done as { jobs: ClaimedJob[] }).jobs;
    expect(taken.map((j) => j.job_id)).toEqual(submitted.slice(0, 2).map((j) => (j.ok ? j.job_id : '')));
    const [rest] = await claim(nc, queue);
    await completeAll(queue, [...taken, rest!]);
  });
});

describe('idempotent completions', () => {
  test('complete resent with the same run id returns the same result and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    const [job] = await claim(nc, queue);
    const first = await complete(nc, queue, job!, { n: 1 });
    expect(first).toEqual({ ok: true, job_id: jobId, status: 'succeeded' });
    const before = await streamMessages(jsm);
    expect(await complete(nc, queue, job!, { n: 1 })).toEqual(first);
    expect(await streamMessages(jsm)).toBe(before);
    expect((await client.get(jobId)).run).toMatchObject({ status: 'completed', result: { n: 1 } });
    // After success, a fail by the same run is refused: the run is closed.
    expect((await fail(nc, queue, job!)).ok).toBe(false);
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('fail resent with the same run id appends nothing and creates no second retry', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue, { max_attempts: 3 });
    const [job] = await claim(nc, queue);
    const first = await fail(nc, queue, job!, { message: 'first' });
    expect(first).toEqual({ ok: true, job_id: jobId, status: 'failed' });
    const retryId = retryJobId(jobId, 1);
    await untilJob(node, retryId, () => true, 'the retry');
    const before = await streamMessages(jsm);
    expect(await fail(nc, queue, job!, { message: 'first' })).toEqual(first);
    await fence(node);
    expect(await streamMessages(jsm)).toBe(before + 2); // the fence's own two events only
    const log = await queueLog(nc, queue);
    expect(log.filter((e) => e.type === 'job.failed')).toHaveLength(1);
    expect(log.filter((e) => e.type === 'job.submitted').map((e) => e.data['job_id'])).toEqual([jobId, retryId]);
    await client.cancel(retryId);
  });
});

describe('claims sent again (request_id)', () => {
  test('a claim sent again with its request_id gets the same runs while they hold their jobs, and appends nothing', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const a = await submit(queue);
    const b = await submit(queue);
    const first = await claim(nc, queue, { max: 2, lease_ms: 60_000, request_id: 'r1' });
    expect(first.map((j) => j.job_id)).toEqual([a, b]);
    const before = await streamMessages(jsm);
    // Its reply lost, the worker sends it again: the same runs, fencing tokens and all.
    expect(await claim(nc, queue, { max: 2, lease_ms: 60_000, request_id: 'r1' })).toEqual(first);
    // The request id is the worker's own: another worker's claim with it is a claim of its own.
    const c = await submit(queue);
    const other = await claim(nc, queue, { worker: 'other-worker', request_id: 'r1' });
    expect(other.map((j) => j.job_id)).toEqual([c]);
    const afterOther = await streamMessages(jsm);
    // A run that ended is not handed out again; with none left, the resend gets nothing.
    await completeAll(queue, [first[0]!]);
    expect(await claim(nc, queue, { max: 2, lease_ms: 60_000, request_id: 'r1' })).toEqual([first[1]]);
    await completeAll(queue, [first[1]!, ...other]);
    const ended = await streamMessages(jsm);
    expect(await claim(nc, queue, { max: 2, lease_ms: 60_000, request_id: 'r1' })).toEqual([]);
    expect(afterOther).toBe(before + 2); // the submit of c, the other worker's claim
    expect(await streamMessages(jsm)).toBe(ended);
    const log = await queueLog(nc, queue);
    expect(log.filter((e) => e.type === 'job.claimed').map((e) => e.jobId)).toEqual([a, b, c]);
  });

  test('a claim sent again while the first is still parked waits for the first\'s answer instead of parking a second claim', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const firstSend = claim(nc, queue, { wait_ms: 20_000, lease_ms: 60_000, request_id: 'parked-1' });
    await untilParked(node, queue, 1);
    const resend = claim(nc, queue, { wait_ms: 20_000, lease_ms: 60_000, request_id: 'parked-1' });
    // Answered after the resend on the same connection: the node has taken the resend.
    expect(await heartbeat(nc, queue, [])).toEqual([]);
    expect(parkedClaims(node, queue)).toBe(1);
    const jobId = await submit(queue);
    const [jobs, again] = await Promise.all([firstSend, resend]);
    expect(jobs.map((j) => j.job_id)).toEqual([jobId]);
    expect(again).toEqual(jobs);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.claimed')).toHaveLength(1);
    await completeAll(queue, jobs);
  });

  test('a completion sent again with its next claim\'s request_id gets the same next run back', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue);
    const [job] = await claim(nc, queue);
    const next = await submit(queue);
    const body = { job_id: job!.job_id, run_id: job!.run_id, result: null, next: { worker: 'test-worker', request_id: 'n1' } };
    const done = await work<{ status: string; jobs: ClaimedJob[] }>(nc, queue, 'complete', body);
    expect(done).toMatchObject({ ok: true, status: 'succeeded', jobs: [{ job_id: next }] });
    const before = await streamMessages(jsm);
    expect(await work(nc, queue, 'complete', body)).toEqual(done);
    expect(await streamMessages(jsm)).toBe(before);
    await completeAll(queue, (done as { jobs: ClaimedJob[] }).jobs);
  });
});

describe('cancel while running', () => {
  test('the heartbeat reply lists the run as lost, its completion is refused, the run failed with reason cancelled', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue, { max_attempts: 3 });
    const [job] = await claim(nc, queue);
    expect(await heartbeat(nc, queue, [job!.run_id])).toEqual([]);
    expect(await client.cancel(jobId, { reason: 'operator' })).toMatchObject({ job_id: jobId, status: 'cancelled' });
    expect(await heartbeat(nc, queue, [job!.run_id])).toEqual([job!.run_id]);
    const before = await streamMessages(jsm);
    expect(await refusal(complete(nc, queue, job!))).toBe('stale_run');
    expect(await streamMessages(jsm)).toBe(before);
    const detail = await client.get(jobId);
    expect(detail.job).toMatchObject({ status: 'cancelled', end_reason: 'operator' });
    expect(detail.run).toMatchObject({ status: 'failed', failure_reason: 'cancelled' });
    // A cancelled job gets no automatic retry, even with attempts left.
    await fence(node);
    expect(node.store.get(retryJobId(jobId, 1))).toBeUndefined();
  });
});

describe('retries', () => {
  const backoff = { base_ms: 1_000, max_ms: 60_000, jitter: 0.5 };

  test('max_attempts 3: fails twice then succeeds; the chain has retry_of, attempts 1,2,3 and derived ids', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submit(queue, { max_attempts: 3, backoff, params: { p: 1 }, priority: 4 });
    const [run1] = await claim(nc, queue);
    expect(run1).toMatchObject({ job_id: first, attempt: 1, max_attempts: 3 });
    await fail(nc, queue, run1!, { message: 'try 1' });
    const failedAt1 = clock.now();

    const second = retryJobId(first, 1);
    const r2 = await untilJob(node, second, () => true, 'retry 2');
    const delay1 = backoffDelayMs(backoff, 1, first);
    expect(delay1).toBeGreaterThanOrEqual(500);
    expect(delay1).toBeLessThanOrEqual(1_000);
    expect(r2.state.job.context).toMatchObject({ retry_of: first, attempt: 2, max_attempts: 3, params: { p: 1 }, priority: 4, run_at: toIso(failedAt1 + delay1) });
    // Not claimable before its backoff has passed.
    expect(await claim(nc, queue)).toEqual([]);
    clock.advance(delay1 - 1);
    expect(await claim(nc, queue)).toEqual([]);
    clock.advance(1);
    const [run2] = await claim(nc, queue);
    expect(run2).toMatchObject({ job_id: second, attempt: 2, max_attempts: 3 });
    await fail(nc, queue, run2!, { message: 'try 2' });
    const failedAt2 = clock.now();

    const third = retryJobId(second, 2);
    const r3 = await untilJob(node, third, () => true, 'retry 3');
    const delay2 = backoffDelayMs(backoff, 2, second);
    expect(delay2).toBeGreaterThanOrEqual(1_000);
    expect(delay2).toBeLessThanOrEqual(2_000);
    expect(r3.state.job.context).toMatchObject({ retry_of: second, attempt: 3, run_at: toIso(failedAt2 + delay2) });
    clock.advance(delay2);
    const [run3] = await claim(nc, queue);
    expect(run3).toMatchObject({ job_id: third, attempt: 3 });
    await complete(nc, queue, run3!, 'done');

    await fence(node);
    const { jobs } = await client.list({ queue });
    expect(jobs.map((j) => [j.job_id, j.status, j.attempt, j.retry_of])).toEqual([
      [first, 'failed', 1, null],
      [second, 'failed', 2, first],
      [third, 'succeeded', 3, second],
    ]);
  });

  test('the last attempt failing ends the chain; a lapse counts as a failure and gets a retry', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const zero = { base_ms: 0, max_ms: 0, jitter: 0 };
    const first = await submit(queue, { max_attempts: 2, backoff: zero });
    await claim(nc, queue, { lease_ms: 1_000 });
    clock.advance(1_000);
    const second = retryJobId(first, 1);
    await untilJob(node, second, () => true, 'the retry of a lapsed run');
    const [run2] = await claim(nc, queue);
    expect(run2).toMatchObject({ job_id: second, attempt: 2, max_attempts: 2 });
    await fail(nc, queue, run2!);
    await fence(node);
    expect(node.store.get(retryJobId(second, 2))).toBeUndefined();
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(2);
  });

  test('retryable:false ends the chain; a retry by hand then creates it once, claimable at once', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submit(queue, { max_attempts: 5, backoff });
    const [run1] = await claim(nc, queue);
    await fail(nc, queue, run1!, { message: 'bad input', retryable: false });
    await fence(node);
    const second = retryJobId(first, 1);
    expect(node.store.get(second)).toBeUndefined();
    expect((await client.get(first)).run).toMatchObject({ status: 'failed', failure_reason: 'error', error: { message: 'bad input', retryable: false } });

    const manual = await client.request<{ job_id: string; created: boolean; retry_of: string; status: string }>('retry', { job_id: first });
    expect(manual).toMatchObject({ job_id: second, created: true, retry_of: first, status: 'queued' });
    expect((await client.get(second)).job).toMatchObject({ attempt: 2, retry_of: first, run_at: toIso(clock.now()) });
    // The same retry again is a resend: the same job (DESIGN: derived ids), nothing appended.
    const before = await streamMessages(jsm);
    const again = await client.request<{ job_id: string; created: boolean }>('retry', { job_id: first });
    expect(again.job_id).toBe(second);
    expect(await streamMessages(jsm)).toBe(before);
    const [run2] = await claim(nc, queue);
    expect(run2).toMatchObject({ job_id: second, attempt: 2 });
    await complete(nc, queue, run2!);
    // Only a failed (or, by hand, cancelled) job can be retried.
    await expect(client.request('retry', { job_id: second })).rejects.toMatchObject({ code: 'invalid_transition' });
    await expect(client.request('retry', { job_id: 'no-such-job' })).rejects.toMatchObject({ code: 'not_found' });
  });

  test('a cancelled job can be retried by hand; a running or queued one cannot', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const cancelled = await submit(queue, { max_attempts: 1 });
    await client.cancel(cancelled);
    const retry = await client.request<{ job_id: string; created: boolean; retry_of: string; status: string }>('retry', { job_id: cancelled });
    expect(retry).toMatchObject({ job_id: retryJobId(cancelled, 1), created: true, retry_of: cancelled, status: 'queued' });
    expect((await client.get(retry.job_id)).job).toMatchObject({ attempt: 2, max_attempts: 2, run_at: toIso(clock.now()) });
    const [run] = await claim(nc, queue);
    expect(run!.job_id).toBe(retry.job_id);
    await expect(client.request('retry', { job_id: retry.job_id })).rejects.toMatchObject({ code: 'invalid_transition' });
    const queued = await submit(queue);
    await expect(client.request('retry', { job_id: queued })).rejects.toMatchObject({ code: 'invalid_transition' });
    await completeAll(queue, [run!]);
    await client.cancel(queued);
  });

  test('a manual retry of a failed job that already has its automatic retry returns that retry with created:false', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submit(queue, { max_attempts: 2, backoff });
    const [run1] = await claim(nc, queue);
    await fail(nc, queue, run1!);
    const auto = await untilJob(node, retryJobId(first, 1), () => true, 'the automatic retry');
    const before = await streamMessages(jsm);
    try {
      const manual = await client.request<{ job_id: string; created: boolean }>('retry', { job_id: first });
      expect(manual.job_id).toBe(auto.jobId);
      expect(await streamMessages(jsm)).toBe(before);
      // This request created nothing: the retrier did, before it. `created` must say so.
      expect(manual.created).toBe(false);
    } finally {
      await client.cancel(auto.jobId);
    }
  });
});

describe('recovery by replay', () => {
  test('a running job found after a restart gets a fresh lease and fails with crash_recovery if never heartbeated', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const silent = await submit(queue);
    const alive = await submit(queue);
    const jobs = await claim(nc, queue, { max: 2, lease_ms: 1_000 });
    expect(jobs.map((j) => j.job_id)).toEqual([silent, alive]);
    clock.advance(900); // most of the lease used before the crash: the restart must not count it

    await restartNode();
    const restartedAt = clock.now();
    const leader = await leadNow(nc, queue, [node]);
    expect(leader).toBe(node);
    expect(node.leases.size).toBe(2);
    const from = (await streamMessages(jsm)) + 1;

    clock.advance(500);
    expect(await heartbeat(nc, queue, [jobs[1]!.run_id])).toEqual([]);
    clock.advance(499);
    await fence(node);
    expect((await client.get(silent)).job.status).toBe('running');
    clock.advance(1);
    const lapse = await nextEvent(client, queue, from, (e) => e.event.type === 'job.failed', 'the crash_recovery lapse');
    expect(lapse.subject.endsWith(silent)).toBe(true);
    expect(lapse.event.time).toBe(toIso(restartedAt + 1_000));
    expect(lapse.event.data).toMatchObject({ run_id: jobs[0]!.run_id, reason: 'crash_recovery' });
    await untilJob(node, silent, (r) => r.state.job.value === 'failed', 'failed');

    // The heartbeated run is alive; without further heartbeats it lapses as an ordinary lease.
    expect((await client.get(alive)).job.status).toBe('running');
    clock.advance(500);
    const second = await nextEvent(client, queue, lapse.seq + 1, (e) => e.event.type === 'job.failed', 'the second lapse');
    expect(second.event.data).toMatchObject({ run_id: jobs[1]!.run_id, reason: 'lease_expired' });
    await untilJob(node, alive, (r) => r.state.job.value === 'failed', 'failed');
    expect(doubleOpenRuns(await queueLog(nc, queue))).toEqual([]);
  });

  test('a run completes through the new node after a restart (its lease was adopted, not lost)', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    const [job] = await claim(nc, queue, { lease_ms: 5_000 });
    await restartNode();
    expect(await heartbeat(nc, queue, [job!.run_id])).toEqual([]);
    expect(await complete(nc, queue, job!, 'after restart')).toEqual({ ok: true, job_id: jobId, status: 'succeeded' });
  });

  test('a failed retryable job whose retry was never created (node gone between the failure and the retry) gets it on restart', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const backoff = { base_ms: 2_000, max_ms: 2_000, jitter: 0 };
    const jobId = await submit(queue, { max_attempts: 2, backoff });
    const [job] = await claim(nc, queue);

    // A second node follows the stream; it will not lead the queue by itself for a long while.
    const follower = await startFileNode({ leadershipLeaseMs: 60_000 });
    let failedAt = 0;
    try {
      await caughtUp(follower, jsm);
      // The leader stops (releasing the queue); the failure is committed as by a leader that
      // died before its retrier acted: the crash window between the two commits.
      await node.close();
      expect(follower.leadership.isLeader(queue)).toBe(false);
      await commitAsDeposed(follower, jsm, queue, [
        envelope(follower.context, 'job.failed', { queue, jobId }, `efail${job!.run_id}`, { run_id: job!.run_id, reason: 'error', error: { message: 'worker error' } }),
      ]);
      failedAt = clock.now();
      await fence(follower);
      expect(follower.store.get(retryJobId(jobId, 1))).toBeUndefined();
      expect((await queueLog(nc, queue)).map((e) => e.type)).toEqual(['job.submitted', 'job.claimed', 'job.failed']);
    } finally {
      await follower.close();
    }

    node = await startFileNode();
    await leadNow(nc, queue, [node]);
    const retry = await untilJob(node, retryJobId(jobId, 1), () => true, 'the retry created by recovery');
    expect(retry.state.job.context).toMatchObject({ retry_of: jobId, attempt: 2, max_attempts: 2 });
    // run_at = the failure's time + backoff, not the recovery's time.
    expect(retry.state.job.context.run_at).toBe(toIso(failedAt + 2_000));

    // Idempotent: another restart creates no second retry.
    await restartNode();
    await leadNow(nc, queue, [node]);
    await fence(node);
    expect((await queueLog(nc, queue)).filter((e) => e.type === 'job.submitted')).toHaveLength(2);
    await client.cancel(retry.jobId);
  });
});

describe('keys and retries', () => {
  test('a keyed job\'s retry holds the key: submitting the key again returns the retry', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submit(queue, { key: 'subject-9', max_attempts: 2, backoff: { base_ms: 5_000, max_ms: 5_000, jitter: 0 } });
    const [run] = await claim(nc, queue);
    await fail(nc, queue, run!);
    const retry = await untilRetryOf(node, first);
    expect(retry.state.job.context).toMatchObject({ key: 'subject-9', attempt: 2 });
    const again = await client.submit({ queue, key: 'subject-9' });
    expect(again).toMatchObject({ job_id: retry.jobId, created: false });
    await client.cancel(retry.jobId);
  });

  test('a keyed failure whose retry was never created, then a submit of the key on the next leader: one live job per key', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue, { key: 'subject-10', max_attempts: 2 });
    const [job] = await claim(nc, queue);
    const follower = await startFileNode({ leadershipLeaseMs: 60_000 });
    try {
      await caughtUp(follower, jsm);
      await node.close();
      // The failure is committed, and its leader dies before its retrier acts (log v2 has no
      // other window: a submit of the key can only reach a leader, which recovers first).
      await commitAsDeposed(follower, jsm, queue, [
        envelope(follower.context, 'job.failed', { queue, jobId }, `efail${job!.run_id}`, { run_id: job!.run_id, reason: 'error', error: { message: 'worker error' } }),
      ]);
    } finally {
      await follower.close();
    }
    node = await startFileNode();
    // The new leader's recovery creates the retry and the submit takes the key's next id: both
    // are decided by the one writer, so whichever comes first holds the key and the other finds it.
    const reply = await client.submit({ queue, key: 'subject-10' });
    await fence(node);
    const live = [...node.store.values()].filter((r) => r.queue === queue && ['queued', 'running', 'waiting'].includes(r.state.job.value)).map((r) => r.jobId);
    try {
      expect(live, 'live jobs holding key subject-10').toEqual([reply.job_id]);
    } finally {
      for (const id of live) await client.cancel(id);
    }
  });
});

describe('keys and retries across nodes', () => {
  test('a keyed failure on one node and a submit of the key on another leave one live job for the key', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue, { key: 'subject-11', max_attempts: 2, backoff: { base_ms: 0, max_ms: 0, jitter: 0 } });
    const [job] = await claim(nc, queue); // the file's node leads the queue
    const other = await startFileNode();
    let live: string[] = [];
    try {
      await caughtUp(other, jsm);
      // The run's failure and, right after, a user's submit of the same key both land on the
      // other node: it forwards both to the leader, which decides them in order.
      const [, reply] = await Promise.all([fail(nc, queue, job!), callNode(other, 'submit', { queue, key: 'subject-11' })]);
      expect(reply.ok).toBe(true);
      // Meanwhile the leader folds the failure and its retrier acts on it.
      await caughtUp(node, jsm);
      await fence(node);
      await caughtUp(other, jsm);
      live = [...node.store.values()].filter((r) => r.queue === queue && ['queued', 'running', 'waiting'].includes(r.state.job.value)).map((r) => r.jobId);
      expect(live, 'live jobs holding key subject-11').toHaveLength(1);
    } finally {
      for (const id of live) await client.cancel(id);
      await other.close();
    }
  });
});

describe('recovery from a checkpoint', () => {
  test('a node restored from its checkpoint keeps the queue order and delays, and adopts the running job', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const dataDir = mkdtempSync(join(tmpdir(), 'docket-claims-checkpoint-'));
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    await node.close();
    node = await startTrackedNode(server, { clock, nodeName: `claims-${++nodeSerial}`, dataDir, checkpointEveryEvents: 1 });
    try {
      const running = await submit(queue, { priority: 0 });
      const [run] = await claim(nc, queue, { lease_ms: 1_000 });
      expect(run!.job_id).toBe(running);
      const delayed = await submit(queue, { priority: 0, delay_ms: 5_000 });
      const order = [await submit(queue, { priority: 7 }), await submit(queue, { priority: 2 }), await submit(queue, { priority: 7 })];
      const t = clock.now();
      await node.close(); // writes the checkpoint

      node = await startTrackedNode(server, { clock, nodeName: `claims-${++nodeSerial}`, dataDir, logger });
      expect(lines.some((l) => l.includes('checkpoint restored'))).toBe(true);
      expect(node.queueOrder.snapshot(queue)).toEqual({ ready: [order[1], order[0], order[2]], delayed: [{ jobId: delayed, runAtMs: t + 5_000 }] });
      await leadNow(nc, queue, [node]);
      expect(node.leases.size).toBe(1);
      const from = (await streamMessages(jsm)) + 1;
      clock.advance(1_000);
      const lapse = await nextEvent(client, queue, from, (e) => e.event.type === 'job.failed', 'the crash_recovery lapse');
      expect(lapse.event.data).toMatchObject({ run_id: run!.run_id, reason: 'crash_recovery' });
      const first = await claim(nc, queue, { max: 10 });
      expect(first.map((j) => j.job_id)).toEqual([order[1], order[0], order[2]]);
      clock.advance(4_000);
      const second = await claim(nc, queue, { max: 10 });
      expect(second.map((j) => j.job_id)).toEqual([delayed]);
      await completeAll(queue, [...first, ...second]);
    } finally {
      await node.close();
      node = await startFileNode();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('claims whose append is refused', () => {
  test('a claim whose only job is cancelled between take and append still answers by wait_ms', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const jobId = await submit(queue);
    await leadNow(nc, queue, [node]);
    // Stage the race between nodes deterministically: the moment the dispatcher takes the job
    // for this claim, a cancel is appended first (as another node's cancel would be), so the
    // claim's guarded append conflicts, is decided again and refused.
    const order = node.queueOrder as unknown as { take: (q: string) => string | undefined };
    const take = order.take;
    order.take = function (this: unknown, q: string) {
      const taken = take.call(node.queueOrder, q);
      if (taken === jobId) {
        order.take = take;
        void transitionJob(node.context, jobId, 'race-cancel', (current, eventId) => envelope(node.context, 'job.cancelled', current, eventId, { reason: 'race' }));
      }
      return taken;
    };
    try {
      const { value, ms } = await timed(
        work<{ jobs: unknown[] }>(nc, queue, 'claim', { worker: 'w', wait_ms: 300 }, 3_000).catch((err: unknown) => ({ ok: false as const, error: { code: 'no_reply', message: String(err) } })),
      );
      expect(value).toEqual({ ok: true, jobs: [] });
      expect(ms).toBeLessThan(2_000);
    } finally {
      order.take = take;
    }
    expect((await client.get(jobId)).job.status).toBe('cancelled');
    expect((await queueLog(nc, queue)).map((e) => e.type)).toEqual(['job.submitted', 'job.cancelled']);
  });

  test('a ready job the machine refuses to claim (clock stepped back) does not freeze the node', async () => {
    // Run in a child process: the failure mode is an event loop that never yields, which would
    // hang this test file too. The child prints each reply; the parent kills it after a deadline.
    const own = await startNatsServer();
    const root = new URL('../..', import.meta.url).pathname.replace(/\/$/, '');
    const script = `
      const root = process.env.DOCKET_ROOT;
      const { startNode } = await import(root + '/src/node.ts');
      const { ManualClock } = await import(root + '/src/clock.ts');
      const { Client } = await import(root + '/src/client/client.ts');
      const clock = new ManualClock();
      const node = await startNode({ servers: process.env.NATS_URL, clock, nodeName: 'stepback' });
      const client = await Client.connect({ servers: process.env.NATS_URL });
      console.log('READY');
      const claim = (wait_ms) => client.nc.request('docket.work.stepback.claim', JSON.stringify({ worker: 'w', wait_ms }), { timeout: 3000 });
      await client.submit({ queue: 'stepback' });
      await client.submit({ queue: 'stepback', delay_ms: 1000 });
      clock.advance(1000);
      console.log('FIRST ' + (await claim(0)).string());
      // The delayed job joined the ready heap when the first claim looked; now the clock steps back.
      clock.set(clock.now() - 500);
      const t = Date.now();
      const second = await claim(300);
      console.log('SECOND ' + (Date.now() - t) + ' ' + second.string());
      await client.close();
      await node.close();
      process.exit(0);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: root,
      env: { ...process.env, DOCKET_ROOT: root, NATS_URL: own.url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    // The 8 s for the claims start once the node serves: starting a child under tsx on a loaded
    // machine can take longer than that by itself.
    let deadline = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const onOutput = (chunk: string) => {
      if (!out.includes('READY') && (out + chunk).includes('READY')) {
        clearTimeout(deadline);
        deadline = setTimeout(() => child.kill('SIGKILL'), 8_000);
      }
      out += chunk;
    };
    child.stdout!.setEncoding('utf8').on('data', onOutput);
    child.stderr!.setEncoding('utf8').on('data', onOutput);
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const code = await exited;
      expect(out).toContain('FIRST {"ok":true');
      expect(out, `the node stopped answering (killed 8 s after it served):\n${out}`).toMatch(/SECOND \d+ \{"ok":true,"jobs":\[\]\}/);
      expect(code).toBe(0);
    } finally {
      clearTimeout(deadline);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await own.stop();
    }
  }, 90_000);
});

describe('start-up', () => {
  test('a node serves work and commands as soon as startNode resolves (no "no responders")', async () => {
    // A server of its own, so that no other node can answer for the new one.
    const own = await startNatsServer();
    const conn = await connect({ servers: own.url, name: 'startup-test' });
    const missed: string[] = [];
    try {
      for (let i = 0; i < 25; i++) {
        const fresh = await startNode({ servers: own.url, clock, nodeName: `startup-${i}` });
        try {
          const [w, c] = await Promise.all([
            conn.request(subjects.work('startup', 'heartbeat'), JSON.stringify({ run_ids: [] }), { timeout: 5_000 }).then(() => null, (err: unknown) => `work: ${String(err)}`),
            conn.request(subjects.command('progress'), '{}', { timeout: 5_000 }).then(() => null, (err: unknown) => `command: ${String(err)}`),
          ]);
          if (w) missed.push(`start ${i}: ${w}`);
          if (c) missed.push(`start ${i}: ${c}`);
        } finally {
          await fresh.close();
        }
      }
    } finally {
      await conn.close();
      await own.stop();
    }
    expect(missed).toEqual([]);
  });
});

describe('the whole log', () => {
  test('everything this file appended passes docket audit (runs this file\'s tests first)', async () => {
    const messages = [];
    for await (const m of readLog(nc)) messages.push(m);
    const audit = auditMessages(messages);
    expect(audit.jobEvents).toBeGreaterThan(100);
    expect(audit.violations.map((v) => `${v.rule} ${v.message}`)).toEqual([]);
  });
});
