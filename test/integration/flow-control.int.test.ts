/**
 * Flow control through NATS (issues 15 and 17): pause and resume, the queue's concurrency and rate
 * limits, per-key limits that skip a held key without holding back the others, reservations
 * (direct execution, conflict, release, expiry), and the limits kept across a restart. Each
 * test takes a queue of its own on one server.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { runDocket } from '../support/cli.js';
import { claim, complete, resendOnUnavailable, until, untilParked } from '../support/worker-helpers.js';
import { closeTestFile, commitAsDeposed, connectTestClients, countEvents, openResources, queueLog, request, startTrackedNode, streamMessages, uniqueQueue } from '../support/docket.js';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'flow' });
  ({ client, nc } = await connectTestClients(server, 'flow-test'));
  jsm = await jetstreamManager(nc);
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(() => {
  expect(openResources()).toHaveLength(1);
});

async function submitMany(queue: string, n: number, spec: Record<string, unknown> = {}): Promise<string[]> {
  const reply = await request(nc, 'submit', { jobs: Array.from({ length: n }, () => ({ queue, ...spec })) });
  if (!reply.ok) throw new Error(JSON.stringify(reply.error));
  return (reply['jobs'] as { job_id: string }[]).map((j) => j.job_id);
}

async function auditQueue(queue: string) {
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog, logFilter } = await import('../../src/store/read-log.js');
  const messages = [];
  for await (const m of readLog(nc, { filter: logFilter(queue) })) messages.push(m);
  return auditMessages(messages);
}

function ok(reply: Awaited<ReturnType<typeof request>>): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

describe('pause and resume', () => {
  test('a paused queue takes submits and hands out nothing until resumed; the log keeps who paused and why', async () => {
    const queue = uniqueQueue('pause');
    await submitMany(queue, 3);
    const paused = ok(await request(nc, 'pause', { queue, reason: 'deploy', actor: 'alice' }));
    expect(paused).toMatchObject({ status: 'paused', paused: { reason: 'deploy', by: 'alice' } });
    await submitMany(queue, 1);
    expect(await claim(nc, queue, { max: 10 })).toHaveLength(0);
    const progress = ok(await request(nc, 'progress', { queue }));
    expect((progress['queues'] as Record<string, unknown>[])[0]!['flow']).toEqual({ status: 'paused', held: expect.objectContaining({ reason: 'paused', detail: expect.stringContaining('deploy') }), waiting_by_reason: { paused: 4 } });
    // A long poll waits while paused and gets the jobs once resumed.
    const waiting = claim(nc, queue, { max: 10, wait_ms: 10_000 });
    await untilParked(node, queue);
    ok(await request(nc, 'resume', { queue }));
    expect(await waiting).toHaveLength(4);
    const events = (await queueLog(nc, queue)).filter((e) => e.type.startsWith('queue.'));
    expect(events.map((e) => [e.type, e.data])).toEqual([['queue.paused', { reason: 'deploy' }], ['queue.resumed', {}]]);
    expect(ok(await request(nc, 'queue.show', { queue }))).toMatchObject({ status: 'active', paused: null });
  });

  test('pausing twice is invalid_transition; an unknown queue is not_found unless created; nothing appended', async () => {
    const queue = uniqueQueue('pause-bad');
    await submitMany(queue, 1);
    ok(await request(nc, 'pause', { queue }));
    const before = await streamMessages(jsm);
    const again = await request(nc, 'pause', { queue });
    expect(again.ok || again.error).toMatchObject({ code: 'invalid_transition', message: expect.stringContaining('already paused') });
    const unknown = uniqueQueue('never-seen');
    const refused = await request(nc, 'pause', { queue: unknown });
    expect(refused.ok || refused.error).toMatchObject({ code: 'not_found', message: expect.stringContaining('create') });
    const resumedUnpaused = await request(nc, 'resume', { queue: unknown, create: true });
    expect(resumedUnpaused.ok || resumedUnpaused.error).toMatchObject({ code: 'invalid_request' });
    expect(await streamMessages(jsm)).toBe(before);
    ok(await request(nc, 'pause', { queue: unknown, create: true, reason: 'before its first job' }));
    expect(ok(await request(nc, 'queue.show', { queue: unknown }))).toMatchObject({ status: 'paused' });
  });
});

describe('limits', () => {
  test('concurrency: a claim gets no more than the free slots; a completion frees one', async () => {
    const queue = uniqueQueue('concurrency');
    await submitMany(queue, 5);
    ok(await request(nc, 'queue.set', { queue, concurrency: 2 }));
    const first = await claim(nc, queue, { max: 5 });
    expect(first).toHaveLength(2);
    expect(await claim(nc, queue, { max: 5 })).toHaveLength(0);
    const shown = ok(await request(nc, 'queue.show', { queue }));
    expect(shown).toMatchObject({ running: 2, held: { reason: 'concurrency' }, waiting_by_reason: { concurrency: 3 } });
    const waiting = claim(nc, queue, { max: 5, wait_ms: 10_000 });
    await untilParked(node, queue);
    await complete(nc, queue, first[0]!);
    expect(await waiting).toHaveLength(1);
    // null clears the limit.
    ok(await request(nc, 'queue.set', { queue, concurrency: null }));
    expect(await claim(nc, queue, { max: 5 })).toHaveLength(2);
  });

  test('key concurrency skips a held key and takes the next job in order', async () => {
    const queue = uniqueQueue('key-concurrency');
    ok(await request(nc, 'queue.set', { queue, key_concurrency: 1, create: true }));
    const ids = await submitMany(queue, 1, { concurrency_key: 'a' });
    ids.push(...(await submitMany(queue, 1, { concurrency_key: 'a' })));
    ids.push(...(await submitMany(queue, 1, { concurrency_key: 'b' })));
    ids.push(...(await submitMany(queue, 1)));
    const claimed = await claim(nc, queue, { max: 10 });
    // The second job of key a waits; b's and the keyless job go ahead of it.
    expect(claimed.map((j) => j.job_id)).toEqual([ids[0], ids[2], ids[3]]);
    const held = ok(await request(nc, 'get', { job_id: ids[1] }));
    expect(held['held']).toMatchObject({ reason: 'key_concurrency', detail: expect.stringContaining('key a') });
    await complete(nc, queue, claimed[0]!);
    expect((await claim(nc, queue, { max: 10, wait_ms: 5_000 })).map((j) => j.job_id)).toEqual([ids[1]]);
  });

  test('rate: at most limit claims in any window of period_ms', async () => {
    const queue = uniqueQueue('rate');
    await submitMany(queue, 6);
    ok(await request(nc, 'queue.set', { queue, rate: { limit: 3, period_ms: 1_000 } }));
    const started = Date.now();
    const first = await claim(nc, queue, { max: 10 });
    expect(first).toHaveLength(3);
    expect(await claim(nc, queue, { max: 10 })).toHaveLength(0);
    const shown = ok(await request(nc, 'queue.show', { queue }));
    expect(shown['held']).toMatchObject({ reason: 'rate', until: expect.any(String) });
    // A sliding window: each slot frees a period after the claim that took it.
    let claimed = first.length;
    while (claimed < 6) claimed += (await claim(nc, queue, { max: 10, wait_ms: 10_000 })).length;
    expect(claimed).toBe(6);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    const claims = (await queueLog(nc, queue)).filter((e) => e.type === 'job.claimed');
    expect(claims).toHaveLength(6);
    // The audit folds the claims' own times: never more than 3 in any second.
    expect((await auditQueue(queue)).violations).toEqual([]);
  });

  test('bad settings are invalid_request and append nothing', async () => {
    const queue = uniqueQueue('bad-settings');
    await submitMany(queue, 1);
    const before = await streamMessages(jsm);
    for (const body of [{ queue, concurrency: 0 }, { queue, concurrency: -1 }, { queue, rate: { limit: 1, period_ms: 10 } }, { queue, rate: { limit: 0, period_ms: 1000 } }, { queue }, { queue, key_rate: { limit: 1 } }]) {
      const reply = await request(nc, 'queue.set', body);
      expect(reply.ok || reply.error, JSON.stringify(body)).toMatchObject({ code: 'invalid_request' });
    }
    const unknown = await request(nc, 'queue.set', { queue: uniqueQueue('unknown'), concurrency: 1 });
    expect(unknown.ok || unknown.error).toMatchObject({ code: 'not_found' });
    expect(await streamMessages(jsm)).toBe(before);
  });

  test('limits and a pause hold after the node restarts (folded from the log, or its checkpoint)', async () => {
    const other = await startNatsServer();
    const dataDir = await mkdtemp(join(tmpdir(), 'docket-flow-'));
    const queue = uniqueQueue('restart');
    let first = await startTrackedNode(other, { nodeName: 'restart-a', dataDir });
    const { client: c2, nc: nc2 } = await connectTestClients(other, 'restart-test');
    try {
      await request(nc2, 'submit', { jobs: Array.from({ length: 4 }, () => ({ queue })) });
      ok(await request(nc2, 'queue.set', { queue, concurrency: 1 }));
      expect(await claim(nc2, queue, { max: 4 })).toHaveLength(1);
      await first.close();
      first = await startTrackedNode(other, { nodeName: 'restart-a', dataDir });
      expect(await claim(nc2, queue, { max: 4 })).toHaveLength(0);
      expect(ok(await request(nc2, 'queue.show', { queue }))).toMatchObject({ settings: { concurrency: 1 }, running: 1 });
      ok(await request(nc2, 'pause', { queue }));
      await first.close();
      // No checkpoint this time: the whole log is folded.
      first = await startTrackedNode(other, { nodeName: 'restart-b' });
      expect(ok(await request(nc2, 'queue.show', { queue }))).toMatchObject({ status: 'paused', settings: { concurrency: 1 } });
      ok(await request(nc2, 'resume', { queue }));
      ok(await request(nc2, 'queue.set', { queue, concurrency: 3 }));
      // The one claimed before the restarts still runs (its lease renewed by recovery): two more slots.
      expect(await claim(nc2, queue, { max: 4 })).toHaveLength(2);
    } finally {
      await first.close();
      await closeTestFile({ client: c2, nc: nc2, nodes: [], server: other });
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('reservations', () => {
  test('while reserved the queue hands out nothing; a second reserve is conflict naming the holder; release resumes dispatch', async () => {
    const queue = uniqueQueue('reserve');
    await submitMany(queue, 2);
    const reserved = ok(await request(nc, 'reserve', { queue, holder: 'ops', ttl_ms: 60_000 }));
    expect(reserved).toMatchObject({ queue, holder: 'ops', reservation_id: expect.stringMatching(new RegExp(`^${queue}-`)) });
    expect(await claim(nc, queue, { max: 5 })).toHaveLength(0);
    const second = await request(nc, 'reserve', { queue, holder: 'someone-else', ttl_ms: 5_000 });
    expect(second.ok || second.error).toMatchObject({ code: 'conflict', message: expect.stringContaining('ops') });
    const listed = ok(await request(nc, 'reservations', { queue }));
    expect(listed['reservations']).toEqual([expect.objectContaining({ reservation_id: reserved['reservation_id'] })]);
    const waiting = claim(nc, queue, { max: 5, wait_ms: 10_000 });
    await untilParked(node, queue);
    ok(await request(nc, 'release', { reservation_id: reserved['reservation_id'] }));
    expect(await waiting).toHaveLength(2);
    const unknown = await request(nc, 'release', { reservation_id: reserved['reservation_id'] });
    expect(unknown.ok || unknown.error).toMatchObject({ code: 'not_found' });
    const types = (await queueLog(nc, queue)).filter((e) => e.type.startsWith('reservation.')).map((e) => e.type);
    expect(types).toEqual(['reservation.activated', 'reservation.released']);
  });

  test('a reserve with a job creates and claims it in the same commit; the holder completes it through the worker protocol', async () => {
    const queue = uniqueQueue('direct');
    await submitMany(queue, 1);
    const reserved = ok(await request(nc, 'reserve', { queue, holder: 'direct-runner', ttl_ms: 30_000, job: { queue, params: { x: 1 } } }));
    const job = reserved['job'] as { job_id: string; run_id: string; params: unknown; fencing_token: number };
    expect(job).toMatchObject({ params: { x: 1 }, fencing_token: expect.any(Number) });
    const log = await queueLog(nc, queue);
    const commit = log.filter((e) => e.seq === log.find((x) => x.type === 'reservation.activated')!.seq).map((e) => e.type);
    expect(commit).toEqual(['reservation.activated', 'job.submitted', 'job.claimed']);
    // The queue's own job stays queued while reserved.
    expect(await claim(nc, queue, { max: 5 })).toHaveLength(0);
    const done = await complete(nc, queue, job);
    expect(done).toMatchObject({ ok: true, status: 'succeeded' });
    ok(await request(nc, 'release', { reservation_id: reserved['reservation_id'] }));
    expect(await claim(nc, queue, { max: 5 })).toHaveLength(1);
  });

  test('a reservation whose holder goes away expires at its ttl and dispatch resumes; renew pushes the expiry', async () => {
    const queue = uniqueQueue('expire');
    await submitMany(queue, 1);
    const reserved = ok(await request(nc, 'reserve', { queue, holder: 'gone', ttl_ms: 1_000 }));
    const renewed = ok(await request(nc, 'renew', { reservation_id: reserved['reservation_id'], ttl_ms: 1_500 }));
    expect(Date.parse(renewed['expires_at'] as string)).toBeGreaterThan(Date.parse(reserved['expires_at'] as string));
    const waiting = claim(nc, queue, { max: 5, wait_ms: 15_000 });
    expect(await waiting).toHaveLength(1);
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(renewed['expires_at'] as string));
    expect(await countEvents(nc, queue, 'reservation.expired')).toBe(1);
  });

  test('bad input: a ttl under a second, an id that is no reservation, a direct job for another queue; nothing appended', async () => {
    const queue = uniqueQueue('reserve-bad');
    await submitMany(queue, 1);
    const before = await streamMessages(jsm);
    for (const [verb, body] of [
      ['reserve', { queue, holder: 'h', ttl_ms: 999 }],
      ['reserve', { queue, holder: 'h', ttl_ms: 5_000, job: { queue: `${queue}x` } }],
      ['release', { reservation_id: 'short' }],
      ['renew', { reservation_id: 'short', ttl_ms: 5_000 }],
    ] as const) {
      const reply = await request(nc, verb, body);
      expect(reply.ok || reply.error, JSON.stringify(body)).toMatchObject({ code: 'invalid_request' });
    }
    expect(await streamMessages(jsm)).toBe(before);
  });
});

describe('the CLI', () => {
  const docket = (args: string[]) => runDocket(server.url, args);

  test('queue set, pause, queue show and resume, as a person types them', async () => {
    const queue = uniqueQueue('cli-flow');
    const refused = await docket(['queue', 'set', queue, '--concurrency', '2']);
    expect(refused).toMatchObject({ code: 1, stderr: expect.stringContaining('error not_found') });
    const set = await docket(['queue', 'set', queue, '--concurrency', '2', '--rate', '50/1000', '--create', '--json']);
    expect(JSON.parse(set.stdout)).toMatchObject({ ok: true, settings: { concurrency: 2, rate: { limit: 50, period_ms: 1000 } } });
    expect(await docket(['pause', queue, '--reason', 'maintenance'])).toMatchObject({ code: 0, stdout: expect.stringContaining('paused: maintenance') });
    const shown = await docket(['queue', 'show', queue]);
    expect(shown.stdout).toMatch(/held\W+paused/);
    await request(nc, 'submit', { queue });
    expect((await docket(['progress', queue])).stdout).toMatch(new RegExp(`${queue}\\W+queue ${queue} is paused: maintenance.*paused 1`));
    expect(await docket(['resume', queue])).toMatchObject({ code: 0, stdout: expect.stringMatching(/status\W+active/) });
    const bad = await docket(['queue', 'set', queue, '--rate', 'fast']);
    expect(bad).toMatchObject({ code: 1, stderr: expect.stringContaining('error invalid_request') });
  });

  test('submit --concurrency-key and --depends-on', async () => {
    const queue = uniqueQueue('cli-submit-flow');
    const [first] = await submitMany(queue, 1);
    const submitted = await docket(['submit', queue, '--concurrency-key', 'tenant-1', '--depends-on', first!, '--json']);
    const jobId = (JSON.parse(submitted.stdout) as { job_id: string }).job_id;
    expect(node.store.get(jobId)!.state.job).toMatchObject({ value: 'waiting', context: { concurrency_key: 'tenant-1', depends_on: [first] } });
  });

  test('explain says which limit held a job while it waited', async () => {
    const queue = uniqueQueue('cli-explain');
    ok(await request(nc, 'queue.set', { queue, key_concurrency: 1, create: true }));
    const [first, second] = await submitMany(queue, 2, { concurrency_key: 'tenant-7' });
    const [claimed] = await claim(nc, queue, { max: 2 });
    expect(claimed!.job_id).toBe(first);
    // An event while the second waits: the hold is read off the log at each event's time.
    await submitMany(queue, 1);
    await complete(nc, queue, claimed!);
    expect((await claim(nc, queue, { max: 1, wait_ms: 5_000 }))[0]!.job_id).toBe(second);
    const explained = await docket(['explain', second!]);
    expect(explained.stdout).toContain('held by key_concurrency (key tenant-7: 1 running at once reached)');
    const json = JSON.parse((await docket(['explain', second!, '--json'])).stdout) as { holds: { reason: string }[] };
    expect(json.holds.map((h) => h.reason)).toEqual(['key_concurrency']);
  });

  test('run-direct runs one job ahead of the queue, fails it by the exit code and releases the queue', async () => {
    const queue = uniqueQueue('cli-direct');
    await submitMany(queue, 1);
    const run = await docket(['run-direct', queue, '--params', '{"n":7}', '--', 'sh', '-c', 'echo "params $DOCKET_PARAMS"; echo broke >&2; exit 3']);
    expect(run.stdout).toContain('params {"n":7}');
    expect(run.code).toBe(3);
    const log = await queueLog(nc, queue);
    const direct = log.find((e) => e.type === 'reservation.activated')!.data['job_id'] as string;
    expect(log.filter((e) => e.jobId === direct).map((e) => e.type)).toEqual(['job.submitted', 'job.claimed', 'job.failed']);
    expect(log.find((e) => e.type === 'job.failed')!.data).toMatchObject({ exit_code: 3, error: { message: 'broke' } });
    expect(log.map((e) => e.type).filter((t) => t.startsWith('reservation.'))).toEqual(['reservation.activated', 'reservation.released']);
    // The queue's own job was held while reserved and is free now.
    expect(await claim(nc, queue, { max: 5 })).toHaveLength(1);
  });
});

test('every queue and reservation event written is accepted by the shipped event schema', async () => {
  const { eventSchema } = await import('../../src/nats/event-schemas.js');
  const { readLog } = await import('../../src/store/read-log.js');
  const { decodeCommit } = await import('../../src/nats/codec.js');
  const seen = new Set<string>();
  for await (const m of readLog(nc, {})) {
    for (const event of decodeCommit(m.data).events) {
      if (event.aggregate.kind === 'job') continue;
      seen.add(event.type);
      expect(eventSchema.safeParse(event).success, JSON.stringify(event)).toBe(true);
    }
  }
  expect([...seen].sort()).toEqual(['queue.paused', 'queue.resumed', 'queue.settings_changed', 'reservation.activated', 'reservation.expired', 'reservation.released', 'reservation.renewed']);
});

test('20 concurrent workers against concurrency 3, rate 50 per second and key concurrency 1 over 5 keys: the log never shows more, every key progresses', async () => {
  const queue = uniqueQueue('twenty-workers');
  ok(await request(nc, 'queue.set', { queue, concurrency: 3, rate: { limit: 50, period_ms: 1_000 }, key_concurrency: 1, create: true }));
  const KEYS = ['t1', 't2', 't3', 't4', 't5'];
  const reply = ok(await request(nc, 'submit', { jobs: Array.from({ length: 150 }, (_, i) => ({ queue, concurrency_key: KEYS[i % KEYS.length] })) }));
  const ids = (reply['jobs'] as { job_id: string }[]).map((j) => j.job_id);
  const { Worker } = await import('../../src/client/worker.js');
  const workers = Array.from({ length: 20 }, (_, i) => new Worker({ queue, nc, workerId: `w${i}`, claimWaitMs: 1_000, handler: () => new Promise((resolve) => setTimeout(() => resolve(null), 5 + (i % 4) * 5)) }));
  const started = Date.now();
  await Promise.all(workers.map((w) => w.start()));
  try {
    await until(node, (store) => ids.every((id) => store.get(id)?.state.job.value === 'succeeded'), 'all 150 jobs succeeded', 30_000);
  } finally {
    await Promise.all(workers.map((w) => w.close()));
  }
  // 150 claims at 50 per second take at least two more windows after the first 50.
  expect(Date.now() - started).toBeGreaterThanOrEqual(2_000);
  // Fold the log: running at once, in all and per key, and claims per window, at every event.
  const log = await queueLog(nc, queue);
  const keyOf = new Map(log.filter((e) => e.type === 'job.submitted').map((e) => [e.jobId, e.data['concurrency_key'] as string]));
  const runningNow = new Set<string>();
  let most = 0;
  for (const e of log) {
    if (e.type === 'job.claimed') {
      runningNow.add(e.jobId);
      const keys = [...runningNow].map((id) => keyOf.get(id));
      expect(new Set(keys).size, 'one running job per key').toBe(keys.length);
      most = Math.max(most, runningNow.size);
    }
    if (e.type === 'job.succeeded' || e.type === 'job.failed') runningNow.delete(e.jobId);
  }
  expect(most).toBeLessThanOrEqual(3);
  expect(most).toBeGreaterThan(1);
  // The audit's rules agree, and check the rate on the claims' own times (limit_exceeded).
  expect((await auditQueue(queue)).violations).toEqual([]);
  // Every key progressed to the end: its 30 jobs succeeded.
  const succeeded = log.filter((e) => e.type === 'job.succeeded').map((e) => keyOf.get(e.jobId));
  for (const key of KEYS) expect(succeeded.filter((k) => k === key)).toHaveLength(30);
});

test('the audit names a claim past a limit (limit_exceeded) and one while paused (claim_while_held)', async () => {
  const queue = uniqueQueue('audit-flow');
  const ids = await submitMany(queue, 3);
  ok(await request(nc, 'queue.set', { queue, concurrency: 1 }));
  const claimed = (jobId: string, i: number) => ({
    id: `forged-claim-${queue}-${i}`, type: 'job.claimed', time: new Date().toISOString(), aggregate: { kind: 'job' as const, id: jobId }, queue,
    data: { run_id: `forged-run-${i}`, worker: 'forger', host: 'h', pid: 1, version: 'v', lease_ms: 60_000 }, meta: { node: 'forger' },
  });
  // A writer that ignored the limit: two claims at once under concurrency 1.
  await commitAsDeposed(node, jsm, queue, [claimed(ids[0]!, 0), claimed(ids[1]!, 1)]);
  // The leader's writer finds the foreign commit at its next append: refolds, answers `unavailable`; a resend goes through.
  ok(await resendOnUnavailable(() => request(nc, 'queue.set', { queue, concurrency: null })));
  ok(await resendOnUnavailable(() => request(nc, 'pause', { queue })));
  await commitAsDeposed(node, jsm, queue, [claimed(ids[2]!, 2)]);
  const rules = (await auditQueue(queue)).violations.map((v) => [v.rule, v.aggregate]);
  expect(rules).toEqual([
    ['limit_exceeded', `job:${ids[1]}`],
    ['claim_while_held', `job:${ids[2]}`],
  ]);
});

test('leader failover: the new leader enforces the limits and the pause from its own fold of the log', async () => {
  const { startTwoNodes } = await import('../support/docket.js');
  const { leadNow } = await import('../support/worker-helpers.js');
  // Short leases: the survivor takes the queue over within a second of the leader going.
  const two = await startTwoNodes('failover', { leadershipLeaseMs: 1_000 });
  try {
    const queue = uniqueQueue('failover');
    await two.client.submitBatch(Array.from({ length: 4 }, () => ({ queue })));
    await two.client.setQueue(queue, { concurrency: 1 });
    const leader = await leadNow(two.nc, queue, [two.a, two.b]);
    const survivor = leader === two.a ? two.b : two.a;
    const [running] = await claim(two.nc, queue, { max: 4, lease_ms: 60_000 });
    expect(running).toBeDefined();
    // The leader stops (its leases are given up); the survivor leads from its warm projections.
    await leader.close();
    expect(await leadNow(two.nc, queue, [survivor])).toBe(survivor);
    expect(await claim(two.nc, queue, { max: 4 })).toHaveLength(0);
    expect(await two.client.showQueue(queue)).toMatchObject({ running: 1, held: { reason: 'concurrency' } });
    await two.client.pause(queue, { reason: 'after failover' });
    await complete(two.nc, queue, running!);
    expect(await claim(two.nc, queue, { max: 4 })).toHaveLength(0);
    await two.client.resume(queue);
    expect(await claim(two.nc, queue, { max: 4, wait_ms: 5_000 })).toHaveLength(1);
  } finally {
    await closeTestFile({ client: two.client, nc: two.nc, nodes: [two.a, two.b], server: two.server });
  }
});
