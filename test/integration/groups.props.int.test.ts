/**
 * Random groups and outcomes through a real node (issue 15, fast-check): a group of 1-5 members,
 * each in its own queue, drawn sequential or parallel, on_failure stop, continue or skip, each
 * member drawn to succeed, fail, be cancelled while queued, or fail once and have its retry
 * succeed or fail. A driver acts on one member at a
 * time (the lowest-numbered claimable one: claimed, then ended) and lets the node settle; after every step the
 * members' statuses and the group's status equal a small pure model of the rules below, and at
 * the end the order of the members' releases in the log equals the model's and the audit is clean.
 *
 * The model (seed 003's JobGroup and issue 15's on_failure):
 *  - sequential: member 0 queued, the rest waiting; a member is released (waiting -> queued) once
 *    every one before it has ended. parallel: every member queued.
 *  - a member's status is its retry chain's last attempt's: one that failed with a retry to come
 *    has not ended (its retry is queued).
 *  - a member that ended other than succeeded (failed, cancelled) is a failure: `stop` cancels the
 *    members not started (waiting or queued), `skip` marks them skipped, `continue` goes on.
 *  - the group is queued until a member started (was claimed), then running; once every member
 *    ended: completed when every run completed (every member succeeded, none after a failed
 *    run), cancelled when every member was cancelled, partial otherwise (some run failed, or some
 *    member was skipped or cancelled).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import type { JobRecord } from '../../src/store/job-store.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, fail } from '../support/worker-helpers.js';
import { closeTestFile, connectTestClients, request, startTrackedNode, uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'groups-props' });
  ({ client, nc } = await connectTestClients(server, 'groups-props-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

type Mode = 'sequential' | 'parallel';
type OnFailure = 'stop' | 'continue' | 'skip';
/** `retry-*`: the member may run twice; its first attempt fails, its retry succeeds or fails. */
type Outcome = 'succeed' | 'fail' | 'cancel' | 'retry-succeed' | 'retry-fail';
type MemberStatus = 'waiting' | 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'skipped';

interface ModelState {
  readonly members: MemberStatus[];
  started: boolean;
  /** Members with a run that failed (a retry's success does not undo it). */
  readonly failedRun: boolean[];
  /** Member indexes in the order they were released (waiting -> queued). */
  readonly released: number[];
}

const ENDED = new Set<MemberStatus>(['succeeded', 'failed', 'cancelled', 'skipped']);

function initial(mode: Mode, size: number): ModelState {
  return { members: Array.from({ length: size }, (_, i) => (mode === 'parallel' || i === 0 ? 'queued' : 'waiting')), started: false, failedRun: Array.from({ length: size }, () => false), released: [] };
}

/** The coordinator's rules after a member ended, applied until nothing changes. */
function settle(state: ModelState, mode: Mode, onFailure: OnFailure): void {
  const failed = state.members.some((s) => ENDED.has(s) && s !== 'succeeded');
  if (failed && onFailure !== 'continue') {
    state.members.forEach((s, i) => {
      if (s === 'waiting' || s === 'queued') state.members[i] = onFailure === 'stop' ? 'cancelled' : 'skipped';
    });
    return;
  }
  if (mode === 'sequential') {
    const next = state.members.findIndex((s) => !ENDED.has(s));
    if (next > 0 && state.members[next] === 'waiting') {
      state.members[next] = 'queued';
      state.released.push(next);
    }
  }
}

/** seed 003's derivation. */
function groupStatus(state: ModelState): string {
  if (!state.members.every((s) => ENDED.has(s))) return state.started ? 'running' : 'queued';
  if (state.members.every((s) => s === 'succeeded') && !state.failedRun.includes(true)) return 'completed';
  if (state.members.every((s) => s === 'cancelled')) return 'cancelled';
  return 'partial';
}

const groupArb = fc.record({
  mode: fc.constantFrom<Mode>('sequential', 'parallel'),
  onFailure: fc.constantFrom<OnFailure>('stop', 'continue', 'skip'),
  outcomes: fc.array(fc.constantFrom<Outcome>('succeed', 'fail', 'cancel', 'retry-succeed', 'retry-fail'), { minLength: 1, maxLength: 5 }),
});

interface Observed {
  readonly members: string[];
  readonly group: string;
}

/** A member's retry chain on the node: the member, then each retry (found by its retry_of). */
function chainOf(jobId: string): JobRecord[] {
  const chain: JobRecord[] = [];
  for (let record = node.store.get(jobId); record !== undefined; ) {
    chain.push(record);
    const id = record.jobId;
    record = [...node.store.values()].find((r) => r.state.job.context.retry_of === id);
  }
  return chain;
}

/** Each member's status as its chain's last attempt shows it, and the group's. */
function observe(groupId: string, memberIds: readonly string[]): Observed {
  return { members: memberIds.map((id) => chainOf(id).at(-1)?.state.job.value ?? 'new'), group: node.aggregates.get('group', groupId)?.state.value ?? 'new' };
}

/** Waits until the node shows what the model expects (the coordinator decides asynchronously), then compares. */
async function expectSettled(groupId: string, memberIds: readonly string[], expected: Observed, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (JSON.stringify(observe(groupId, memberIds)) !== JSON.stringify(expected) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  expect(observe(groupId, memberIds), what).toEqual(expected);
}

test('released in the model order; members and the group end as the model of seed 003 and on_failure says', async () => {
  await fc.assert(
    fc.asyncProperty(groupArb, async ({ mode, onFailure, outcomes }) => {
      const queues = outcomes.map(() => uniqueQueue('grp-prop'));
      const jobs = outcomes.map((outcome, i) => ({ queue: queues[i], max_attempts: outcome.startsWith('retry') ? 2 : 1, backoff: { base_ms: 0, max_ms: 0, jitter: 0 } }));
      const reply = await request(nc, 'group.create', { mode, on_failure: onFailure, jobs });
      if (!reply.ok) throw new Error(JSON.stringify(reply.error));
      const groupId = reply['group_id'] as string;
      const ids = reply['jobs'] as string[];
      const model = initial(mode, outcomes.length);
      const expected = (): Observed => ({ members: [...model.members], group: groupStatus(model) });
      await expectSettled(groupId, ids, expected(), 'as created');
      const attempts = outcomes.map(() => 0);
      for (let step = 0; step < 2 * outcomes.length; step++) {
        const i = model.members.findIndex((s) => s === 'queued');
        if (i < 0) break;
        const outcome = outcomes[i]!;
        const attempt = ++attempts[i]!;
        if (outcome === 'cancel') {
          const cancelled = await request(nc, 'cancel', { job_id: ids[i], reason: 'drawn to be cancelled' });
          if (!cancelled.ok) throw new Error(JSON.stringify(cancelled.error));
          model.members[i] = 'cancelled';
        } else {
          const jobs = await claim(nc, queues[i]!, { max: 5 });
          expect(jobs.map((j) => j.job_id), `member ${i} claimable (attempt ${attempt})`).toEqual([chainOf(ids[i]!)[attempt - 1]!.jobId]);
          // Claimed: the member runs, and with it the group (seed 003: any job running).
          model.members[i] = 'running';
          model.started = true;
          await expectSettled(groupId, ids, expected(), `member ${i} running (${mode}, on_failure ${onFailure}, outcomes ${outcomes.join(',')})`);
          const succeeds = outcome === 'succeed' || (outcome === 'retry-succeed' && attempt === 2);
          if (succeeds) await complete(nc, queues[i]!, jobs[0]!);
          else await fail(nc, queues[i]!, jobs[0]!, { message: 'drawn to fail' });
          // A first attempt that fails with a retry to come has not ended the member: its retry is queued.
          if (!succeeds) model.failedRun[i] = true;
          model.members[i] = succeeds ? 'succeeded' : outcome.startsWith('retry') && attempt === 1 ? 'queued' : 'failed';
        }
        settle(model, mode, onFailure);
        await expectSettled(groupId, ids, expected(), `after member ${i} ${outcome} (${mode}, on_failure ${onFailure}, outcomes ${outcomes.join(',')})`);
      }
      expect(model.members.every((s) => ENDED.has(s))).toBe(true);
      // The releases in the log, by position, are the model's, each after the member before it ended (its chain's last attempt).
      const releasedAt = ids.map((id) => node.store.get(id)!.later.find((h) => h.type === 'job.released')?.seq ?? null);
      const order = releasedAt
        .map((seq, index) => ({ seq, index }))
        .filter((r): r is { seq: NonNullable<typeof r.seq>; index: number } => r.seq !== null)
        .sort((x, y) => (x.seq < y.seq ? -1 : 1))
        .map((r) => r.index);
      expect(order, 'the release order').toEqual(model.released);
      for (const i of model.released) {
        const before = chainOf(ids[i - 1]!).at(-1)!.later.filter((h) => ['job.succeeded', 'job.failed', 'job.cancelled', 'job.skipped'].includes(h.type)).map((h) => h.seq);
        expect(before.length, `member ${i - 1} ended`).toBe(1);
        expect(before[0]! < releasedAt[i]!, `member ${i} released after member ${i - 1} ended`).toBe(true);
      }
    }),
    { numRuns: Number(process.env.DOCKET_NUM_RUNS ?? 20) },
  );
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog } = await import('../../src/store/read-log.js');
  const messages = [];
  for await (const m of readLog(nc, {})) messages.push(m);
  expect(auditMessages(messages).violations).toEqual([]);
}, 240_000);
