/**
 * Templates and schedules end to end through a real nats-server: the sys commands on the sys
 * leader, the ticker firing each due tick once with its derived job id (driven by a ManualClock),
 * catch-up after the node was down, two nodes on one server never firing a tick twice,
 * enable/disable/delete, trigger, backfill, bad input appending nothing, and a clean audit.
 */
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import type { JetStreamManager } from '@nats-io/jetstream';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { ScheduleContext } from '../../machines/index.js';
import { ManualClock } from '../../src/clock.js';
import { scheduledJobId, triggeredJobId } from '../../src/ids.js';
import type { DocketNode } from '../../src/node.js';
import { readLog } from '../../src/store/read-log.js';
import { closeTestFile, connectTestClients, openResources, request, okReply as ok, startTrackedNode, streamMessages, uniqueQueue, untilFolded, type RawReply } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { runDocket } from '../support/cli.js';

let server: TestNatsServer;
let nc: NatsConnection;
let jsm: JetStreamManager;
let client: Awaited<ReturnType<typeof connectTestClients>>['client'];
const nodes: DocketNode[] = [];
// On a whole second, so every-second ticks are exact.
const clock = new ManualClock(Date.parse('2026-05-04T10:00:00.000Z'));
let serial = 0;
const uniqueName = (base: string) => `${base}-${++serial}-${process.pid}`;

beforeAll(async () => {
  server = await startNatsServer();
  nodes.push(await startTrackedNode(server, { clock, nodeName: 'sched-a' }));
  ({ client, nc, jsm } = await connectTestClients(server, 'schedules-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes, server });
});

afterEach(() => {
  expect(openResources().length).toBeLessThanOrEqual(1 + nodes.length);
});

const until = untilFolded;


const scheduleOf = (node: DocketNode, name: string) => node.aggregates.stateOf<ScheduleContext>('schedule', name);

/** The sys partition's events of one schedule, in log order. */
async function scheduleEvents(name: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
  const out: { type: string; data: Record<string, unknown> }[] = [];
  for await (const m of readLog(nc, { filter: 'docket.log.sys' })) {
    const commit = JSON.parse(new TextDecoder().decode(m.data)) as { events: { type: string; aggregate: { kind: string; id: string }; data: Record<string, unknown> }[] };
    for (const e of commit.events) if (e.aggregate.kind === 'schedule' && e.aggregate.id === name) out.push({ type: e.type, data: e.data });
  }
  return out;
}

const tickAt = (ms: number) => new Date(ms).toISOString();

describe('templates', () => {
  test('put numbers revisions, archive refuses a second archive, get and list read them', async () => {
    const name = uniqueName('tpl');
    const queue = uniqueQueue('tpl');
    const first = ok(await request(nc, 'template.put', { name, queue, params: { a: 1 } }));
    expect(first).toMatchObject({ name, status: 'active', revision: 1, spec: { queue, params: { a: 1 } } });
    const second = ok(await request(nc, 'template.put', { name, queue, params: { a: 2 }, priority: 3 }));
    expect(second).toMatchObject({ revision: 2, spec: { params: { a: 2 }, priority: 3 } });
    expect(ok(await request(nc, 'template.archive', { name }))).toMatchObject({ status: 'archived' });
    const again = await request(nc, 'template.archive', { name });
    expect(again.ok).toBe(false);
    if (!again.ok) expect(again.error.code).toBe('invalid_transition');
    expect(ok(await request(nc, 'template.get', { name }))).toMatchObject({ name, status: 'archived', revision: 2 });
    const list = ok(await request(nc, 'template.list', {}))['templates'] as { name: string }[];
    expect(list.map((t) => t.name)).toContain(name);
  });
});

describe('a submit naming a template', () => {
  test('params merged under the submit\'s, defaults where the submit gives none, the queue filled; the job records the template\'s name and revision', async () => {
    const node = nodes[0]!;
    const template = uniqueName('submit-tpl');
    const queue = uniqueQueue('submit-tpl');
    ok(await request(nc, 'template.put', { name: template, queue, params: { a: 1, b: 1 }, priority: 7 }));
    ok(await request(nc, 'template.put', { name: template, queue, params: { a: 2, b: 1 }, priority: 7, max_attempts: 3 }));
    const reply = ok(await request(nc, 'submit', { template, params: { b: 9, c: 3 } }));
    const record = node.store.get(reply['job_id'] as string)!;
    expect(record.queue).toBe(queue);
    expect(record.state.job.context).toMatchObject({ params: { a: 2, b: 9, c: 3 }, priority: 7, max_attempts: 3 });
    const batch = ok(await request(nc, 'submit', { jobs: [{ template, queue, priority: 1 }, { template: 'no-such-template-x', queue }, { template, queue: 'another-queue' }] }));
    const items = batch['jobs'] as RawReply[];
    expect(items[0]!.ok).toBe(true);
    expect(node.store.get((items[0] as unknown as { job_id: string }).job_id)!.state.job.context).toMatchObject({ params: { a: 2, b: 1 }, priority: 1 });
    expect(items[1]!.ok === false && items[1]!.error.code).toBe('invalid_request');
    expect(items[2]!.ok === false && items[2]!.error.message).toContain(`queue ${queue}`);
    // The log records the revision each job was made from.
    const submitted: Record<string, unknown>[] = [];
    for await (const m of readLog(nc, { filter: `docket.log.q.${queue}` })) {
      const commit = JSON.parse(new TextDecoder().decode(m.data)) as { events: { type: string; data: Record<string, unknown> }[] };
      for (const e of commit.events) if (e.type === 'job.submitted') submitted.push(e.data);
    }
    expect(submitted.map((d) => d['template'])).toEqual([{ name: template, revision: 2 }, { name: template, revision: 2 }]);
    ok(await request(nc, 'template.archive', { name: template }));
    const refused = await request(nc, 'submit', { template });
    expect(refused.ok === false && refused.error.code).toBe('invalid_transition');
  });
});

describe('the ticker', () => {
  test('a schedule every second fires once per tick, each job under its derived id with the template\'s params merged', async () => {
    const node = nodes[0]!;
    const name = uniqueName('every-second');
    const template = uniqueName('tpl');
    const queue = uniqueQueue('every');
    ok(await request(nc, 'template.put', { name: template, queue, params: { a: 1, b: 1 } }));
    const put = ok(await request(nc, 'schedule.put', { name, template, cron: '* * * * * *', params: { b: 2 } }));
    expect(put).toMatchObject({ name, status: 'enabled', revision: 1 });
    const start = clock.now();
    for (let i = 1; i <= 3; i++) {
      clock.advance(1_000);
      const jobId = scheduledJobId(name, tickAt(start + i * 1_000));
      await until(node, () => node.store.get(jobId) !== undefined, `the job of tick ${i}`);
      expect(node.store.get(jobId)!.queue).toBe(queue);
      expect(node.store.get(jobId)!.state.job.context.params).toEqual({ a: 1, b: 2 });
      // Let each job end, so the overlap policy (skip) lets the next tick fire.
      ok(await request(nc, 'cancel', { job_id: jobId }));
    }
    await until(node, () => scheduleOf(node, name).context.fired_count === 3, 'three fires');
    const fired = (await scheduleEvents(name)).filter((e) => e.type === 'schedule.fired');
    expect(fired.map((e) => e.data['tick'])).toEqual([1, 2, 3].map((i) => tickAt(start + i * 1_000)));
    expect(fired.map((e) => e.data['job_id'])).toEqual([1, 2, 3].map((i) => scheduledJobId(name, tickAt(start + i * 1_000))));
    ok(await request(nc, 'schedule.delete', { name }));
  });

  test('overlap skip: while the last fire\'s job is live, the next tick is missed (overlap)', async () => {
    const node = nodes[0]!;
    const name = uniqueName('skip');
    const queue = uniqueQueue('skip');
    ok(await request(nc, 'schedule.put', { name, job: { queue }, cron: '* * * * * *' }));
    const start = clock.now();
    clock.advance(1_000);
    await until(node, () => node.store.get(scheduledJobId(name, tickAt(start + 1_000))) !== undefined, 'the first job');
    clock.advance(1_000);
    await until(node, () => scheduleOf(node, name).context.missed_count === 1, 'a missed tick');
    const events = await scheduleEvents(name);
    expect(events.at(-1)).toEqual({ type: 'schedule.missed', data: { tick: tickAt(start + 2_000), reason: 'overlap' } });
    ok(await request(nc, 'schedule.delete', { name }));
  });

  test('overlap buffer_one: a tick waits while the last job is live and fires when it ends; cancel_other cancels the live job and fires', async () => {
    const node = nodes[0]!;
    const name = uniqueName('buffer');
    const queue = uniqueQueue('buffer');
    ok(await request(nc, 'schedule.put', { name, job: { queue }, cron: '* * * * * *', overlap: 'buffer_one' }));
    const start = clock.now();
    clock.advance(1_000);
    const first = scheduledJobId(name, tickAt(start + 1_000));
    await until(node, () => node.store.get(first) !== undefined, 'the first job');
    clock.advance(1_000);
    // The tick waits: nothing fired or missed while the first job is live.
    const view = ok(await request(nc, 'schedule.get', { name }));
    expect(view).toMatchObject({ fired_count: 1, missed_count: 0 });
    ok(await request(nc, 'cancel', { job_id: first }));
    const second = scheduledJobId(name, tickAt(start + 2_000));
    await until(node, () => node.store.get(second) !== undefined, 'the waiting tick fired once the job ended');
    ok(await request(nc, 'schedule.delete', { name }));

    const other = uniqueName('cancel-other');
    ok(await request(nc, 'schedule.put', { name: other, job: { queue }, cron: '* * * * * *', overlap: 'cancel_other' }));
    const t0 = clock.now();
    clock.advance(1_000);
    const live = scheduledJobId(other, tickAt(t0 + 1_000));
    await until(node, () => node.store.get(live) !== undefined, 'the first cancel_other job');
    clock.advance(1_000);
    const next = scheduledJobId(other, tickAt(t0 + 2_000));
    await until(node, () => node.store.get(next) !== undefined && node.store.get(live)?.state.job.value === 'cancelled', 'the live job cancelled and the next fired');
    ok(await request(nc, 'schedule.delete', { name: other }));
  });

  test('disable stops the fires (ticks due meanwhile are missed as paused on enable), delete ends them', async () => {
    const node = nodes[0]!;
    const name = uniqueName('toggle');
    const queue = uniqueQueue('toggle');
    ok(await request(nc, 'schedule.put', { name, job: { queue }, cron: '* * * * * *', overlap: 'allow_all' }));
    const start = clock.now();
    clock.advance(1_000);
    await until(node, () => scheduleOf(node, name).context.fired_count === 1, 'the first fire');
    expect(ok(await request(nc, 'schedule.disable', { name, note: 'maintenance' }))).toMatchObject({ status: 'disabled', disabled_note: 'maintenance' });
    clock.advance(2_000);
    expect(scheduleOf(node, name).context.fired_count).toBe(1);
    expect(ok(await request(nc, 'schedule.enable', { name }))).toMatchObject({ status: 'enabled' });
    // The tick due while disabled is missed as paused; the one at the instant of the enable fires.
    await until(node, () => scheduleOf(node, name).context.fired_count === 2, 'the fire at the enable');
    const events = (await scheduleEvents(name)).filter((e) => e.type === 'schedule.missed' || e.type === 'schedule.fired');
    expect(events.map((e) => [e.type, e.data['tick'], e.data['reason']])).toEqual([
      ['schedule.fired', tickAt(start + 1_000), undefined],
      ['schedule.missed', tickAt(start + 2_000), 'paused'],
      ['schedule.fired', tickAt(start + 3_000), undefined],
    ]);
    clock.advance(1_000);
    await until(node, () => scheduleOf(node, name).context.fired_count === 3, 'a fire after enable');
    expect(ok(await request(nc, 'schedule.delete', { name }))).toMatchObject({ status: 'deleted', next: [] });
    clock.advance(2_000);
    // The ticker's run after the clock moved has nothing to do: a deleted schedule fires nothing.
    const after = await request(nc, 'schedule.get', { name });
    expect(ok(after)).toMatchObject({ status: 'deleted', fired_count: 3 });
    const listed = ok(await request(nc, 'schedule.list', {}))['schedules'] as { name: string }[];
    expect(listed.map((s) => s.name)).not.toContain(name);
  });

  test('trigger fires now outside the cron; a resend with the same id fires once', async () => {
    const node = nodes[0]!;
    const name = uniqueName('trigger');
    const queue = uniqueQueue('trigger');
    ok(await request(nc, 'schedule.put', { name, job: { queue, params: { x: 1 } }, cron: '0 0 1 1 *' }));
    const first = ok(await request(nc, 'schedule.trigger', { id: `t-${name}`, name }));
    expect(first).toMatchObject({ schedule: name, tick: tickAt(clock.now()), replayed: false });
    const jobId = first['job_id'] as string;
    expect(node.store.get(jobId)?.state.job.context.params).toEqual({ x: 1 });
    const again = ok(await request(nc, 'schedule.trigger', { id: `t-${name}`, name }));
    expect(again).toMatchObject({ job_id: jobId, replayed: true });
    expect(scheduleOf(node, name).context.fired_count).toBe(1);
    ok(await request(nc, 'schedule.delete', { name }));
  });

  test('backfill fires each past tick without a job once; the cron\'s own fires are skipped', async () => {
    const node = nodes[0]!;
    const name = uniqueName('backfill');
    const queue = uniqueQueue('backfill');
    const putAt = clock.now();
    ok(await request(nc, 'schedule.put', { name, job: { queue }, cron: '* * * * * *', overlap: 'allow_all' }));
    clock.advance(2_000);
    await until(node, () => scheduleOf(node, name).context.fired_count === 2, 'two cron fires');
    const reply = ok(await request(nc, 'schedule.backfill', { name, from: tickAt(putAt - 3_000), to: tickAt(putAt + 2_000) }));
    expect(reply['fired']).toEqual([tickAt(putAt - 3_000), tickAt(putAt - 2_000), tickAt(putAt - 1_000), tickAt(putAt)]);
    expect(reply['skipped']).toEqual([tickAt(putAt + 1_000), tickAt(putAt + 2_000)]);
    for (const tick of reply['fired'] as string[]) expect(node.store.get(scheduledJobId(name, tick))?.queue).toBe(queue);
    const twice = ok(await request(nc, 'schedule.backfill', { name, from: tickAt(putAt - 3_000), to: tickAt(putAt) }));
    expect(twice['fired']).toEqual([]);
    ok(await request(nc, 'schedule.delete', { name }));
  });

  test('bad input is invalid_request naming the field, and appends nothing', async () => {
    const before = await streamMessages(jsm);
    const cases: [string, unknown, string][] = [
      ['schedule.put', { name: 'bad-cron', job: { queue: 'q' }, cron: '61 * * * *' }, 'cron'],
      ['schedule.put', { name: 'bad-tz', job: { queue: 'q' }, cron: '* * * * *', timezone: 'Mars/Olympus' }, 'timezone'],
      ['schedule.put', { name: 'bad-end', job: { queue: 'q' }, cron: '* * * * *', start_at: '2026-01-02T00:00:00Z', end_at: '2026-01-01T00:00:00Z' }, 'end_at'],
      ['schedule.put', { name: 'no-tpl', template: 'nope-never-put', cron: '* * * * *' }, 'template'],
      ['schedule.put', { name: 'bad-jitter', job: { queue: 'q' }, cron: '* * * * *', jitter_ms: -1 }, 'jitter_ms'],
      ['template.put', { name: 'bad name', queue: 'q' }, 'name'],
    ];
    for (const [verb, body, field] of cases) {
      const reply = await request(nc, verb, body);
      expect(reply.ok, `${verb} ${JSON.stringify(body)}`).toBe(false);
      if (!reply.ok) {
        expect(reply.error.code).toBe('invalid_request');
        expect(reply.error.message).toContain(field);
      }
    }
    const missing = await request(nc, 'schedule.enable', { name: 'never-put-schedule' });
    expect(missing.ok === false && missing.error.code).toBe('not_found');
    expect(await streamMessages(jsm)).toBe(before);
  });
});

/** `node bin/docket.js <args>` against this file's first server. */
const docket = (args: readonly string[]) => runDocket(server.url, args);

describe('the CLI', () => {
  test('template put/show/ls/archive and schedule put/show/ls/trigger/disable/delete, as tables and --json', async () => {
    const template = uniqueName('cli-tpl');
    const name = uniqueName('cli-sched');
    const queue = uniqueQueue('cli');
    const put = await docket(['template', 'put', template, '--queue', queue, '--params', '{"a":1}', '--json']);
    expect(put.stderr).toBe('');
    expect(JSON.parse(put.stdout)).toMatchObject({ ok: true, name: template, revision: 1, status: 'active' });
    expect((await docket(['template', 'show', template])).stdout).toContain(queue);
    expect((await docket(['template', 'ls'])).stdout).toContain(template);

    const added = await docket(['schedule', 'add', name, '--cron', '0 9 * * MON-FRI', '--tz', 'Europe/Berlin', '--template', template, '--params', '{"b":2}']);
    expect(added.code).toBe(0);
    expect(added.stdout).toContain(`template ${template}`);
    expect(added.stdout).toContain('next (Europe/Berlin)');
    const listed = JSON.parse((await docket(['schedule', 'ls', '--json'])).stdout) as { schedules: { name: string; spec: { timezone: string } }[] };
    expect(listed.schedules.find((s) => s.name === name)?.spec.timezone).toBe('Europe/Berlin');
    expect((await docket(['schedule', 'ls'])).stdout).toContain(name);

    const fired = JSON.parse((await docket(['schedule', 'trigger', name, '--json'])).stdout) as { job_id: string };
    expect(nodes[0]!.store.get(fired.job_id)?.state.job.context.params).toEqual({ a: 1, b: 2 });
    expect((await docket(['schedule', 'show', name])).stdout).toContain(fired.job_id);
    const explained = JSON.parse((await docket(['explain', fired.job_id, '--json'])).stdout) as { notes: string[] };
    expect(explained.notes).toContain(`made from template ${template}, revision 1`);
    expect(explained.notes.some((n) => n.startsWith(`made by schedule ${name}: its manual fire of tick `))).toBe(true);

    expect(JSON.parse((await docket(['schedule', 'disable', name, '--note', 'holiday', '--json'])).stdout)).toMatchObject({ status: 'disabled', disabled_note: 'holiday' });
    const bad = await docket(['schedule', 'put', 'cli-bad', '--cron', '61 * * * *', '--queue', queue]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('cron');
    expect(JSON.parse((await docket(['schedule', 'delete', name, '--json'])).stdout)).toMatchObject({ status: 'deleted' });
    expect(JSON.parse((await docket(['template', 'archive', template, '--json'])).stdout)).toMatchObject({ status: 'archived' });
    const replay = JSON.parse((await docket(['replay', '--schedule', name, '--json'])).stdout) as { entries: { type: string; accepted: boolean; status: string }[]; fired: number };
    expect(replay.entries.map((e) => [e.type, e.status])).toEqual([
      ['schedule.put', 'enabled'],
      ['schedule.fired', 'enabled'],
      ['schedule.disabled', 'disabled'],
      ['schedule.deleted', 'deleted'],
    ]);
    expect(replay.entries.every((e) => e.accepted)).toBe(true);
    expect(replay.fired).toBe(1);
    expect((await docket(['replay', '--schedule', name])).stdout).toContain('manual');
  });
});

describe('restarts and two nodes (a server of their own)', () => {
  let server2: TestNatsServer;
  let nc2: NatsConnection;
  const local: DocketNode[] = [];

  beforeAll(async () => {
    server2 = await startNatsServer();
  });

  afterAll(async () => {
    await nc2?.drain();
    for (const node of local) await node.close();
    await server2.stop();
  });

  async function start(nodeName: string, clk: ManualClock): Promise<DocketNode> {
    const node = await startTrackedNode(server2, { clock: clk, nodeName, leadershipLeaseMs: 1_500 });
    local.push(node);
    return node;
  }

  async function stop(node: DocketNode): Promise<void> {
    await node.close();
    local.splice(local.indexOf(node), 1);
  }

  async function sysEventsOf(name: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
    const out: { type: string; data: Record<string, unknown> }[] = [];
    for await (const m of readLog(nc2, { filter: 'docket.log.sys' })) {
      const commit = JSON.parse(new TextDecoder().decode(m.data)) as { events: { type: string; aggregate: { kind: string; id: string }; data: Record<string, unknown> }[] };
      for (const e of commit.events) if (e.aggregate.kind === 'schedule' && e.aggregate.id === name) out.push({ type: e.type, data: e.data });
    }
    return out;
  }

  test('catch-up latest after the node was down: the newest missed tick fires, the older ones are missed (catchup); the tick at the restart fires', async () => {
    const clk = new ManualClock(Date.parse('2026-05-04T12:00:00.000Z'));
    const { connect } = await import('@nats-io/transport-node');
    nc2 = await connect({ servers: server2.url });
    let node = await start('restart-a', clk);
    const name = uniqueName('catchup');
    const queue = uniqueQueue('catchup');
    const start0 = clk.now();
    ok(await request(nc2, 'schedule.put', { name, job: { queue }, cron: '* * * * * *', catchup: 'latest', overlap: 'allow_all' }));
    clk.advance(1_000);
    await until(node, () => node.store.get(scheduledJobId(name, tickAt(start0 + 1_000))) !== undefined, 'the first fire\'s job');
    await stop(node);
    clk.advance(5_000);
    node = await start('restart-b', clk);
    const fiveJob = scheduledJobId(name, tickAt(start0 + 5_000));
    const sixJob = scheduledJobId(name, tickAt(start0 + 6_000));
    await until(node, () => node.store.get(fiveJob) !== undefined && node.store.get(sixJob) !== undefined, 'the caught-up fire and the fire at the restart');
    const events = (await sysEventsOf(name)).filter((e) => e.type === 'schedule.fired' || e.type === 'schedule.missed');
    expect(events.map((e) => [e.type, e.data['tick'], e.data['reason']])).toEqual([
      ['schedule.fired', tickAt(start0 + 1_000), undefined],
      ['schedule.missed', tickAt(start0 + 2_000), 'catchup'],
      ['schedule.missed', tickAt(start0 + 3_000), 'catchup'],
      ['schedule.missed', tickAt(start0 + 4_000), 'catchup'],
      ['schedule.fired', tickAt(start0 + 5_000), undefined],
      ['schedule.fired', tickAt(start0 + 6_000), undefined],
    ]);
    ok(await request(nc2, 'schedule.delete', { name }));
    await stop(node);
  });

  test('a fire committed by a leader that died before submitting its job: the next leader submits it', async () => {
    const clk = new ManualClock(Date.parse('2026-05-04T13:00:00.000Z'));
    let node = await start('lost-a', clk);
    const name = uniqueName('lost');
    const queue = uniqueQueue('lost');
    // A cron that does not fire in this test: only the fire appended by hand below.
    ok(await request(nc2, 'schedule.put', { name, job: { queue, params: { n: 1 } }, cron: '0 0 1 1 *' }));
    const tick = tickAt(clk.now());
    const jobId = triggeredJobId(name, 'lost-trigger');
    // What a leader appends before it submits the job (a manual trigger's fire), and no job.
    const { aggregateEnvelope } = await import('../../src/commands/handle-command.js');
    const { SYS_LEASE } = await import('../../src/nats/subjects.js');
    const writer = await node.context.writer(SYS_LEASE);
    await writer.append([aggregateEnvelope(node.context, 'schedule.fired', { kind: 'schedule', id: name }, `evt-lost-${serial}`, { tick, job_id: jobId, trigger: 'manual' })]);
    expect(node.store.get(jobId)).toBeUndefined();
    await stop(node);
    node = await start('lost-b', clk);
    await until(node, () => node.store.get(jobId) !== undefined, 'the resubmitted job');
    expect(node.store.get(jobId)!.state.job.context.params).toEqual({ n: 1 });
    ok(await request(nc2, 'schedule.delete', { name }));
    await stop(node);
  });

  test('two nodes on one server: each tick fires once, also across a takeover of the sys leader; the audit is clean', async () => {
    const clk = new ManualClock(Date.parse('2026-05-04T14:00:00.000Z'));
    const a = await start('two-a', clk);
    const b = await start('two-b', clk);
    const name = uniqueName('two');
    const queue = uniqueQueue('two');
    const start0 = clk.now();
    ok(await request(nc2, 'schedule.put', { name, job: { queue }, cron: '* * * * * *', catchup: 'all', overlap: 'allow_all' }));
    for (let i = 1; i <= 4; i++) {
      clk.advance(1_000);
      for (const node of [a, b]) await until(node, () => node.store.get(scheduledJobId(name, tickAt(start0 + i * 1_000))) !== undefined, `tick ${i} on ${node.name}`);
    }
    // The sys leader goes; the other node takes over (its lease expires first) and goes on.
    const leader = a.leadership.isLeader('sys.partition') ? a : b;
    const other = leader === a ? b : a;
    await stop(leader);
    clk.advance(2_000);
    await until(other, () => other.store.get(scheduledJobId(name, tickAt(start0 + 6_000))) !== undefined, 'tick 6 after the takeover', 15_000);
    const { fired, missed } = await handledTicks(name);
    // catch-up all: every tick fired, each once, in order; none missed.
    expect(missed).toEqual([]);
    expect(fired).toEqual([1, 2, 3, 4, 5, 6].map((i) => tickAt(start0 + i * 1_000)));
    ok(await request(nc2, 'schedule.delete', { name }));

    const { auditMessages } = await import('../../src/audit/index.js');
    const messages = [];
    for await (const m of readLog(nc2, {})) messages.push(m);
    const report = auditMessages(messages);
    expect(report.violations).toEqual([]);
    expect(report.ok).toBe(true);
    await stop(other);
  });

  test('real time: a schedule every second fires on consecutive whole seconds, each job under its derived id', async () => {
    const node = await startTrackedNode(server2, { nodeName: 'real-a', leadershipLeaseMs: 1_500 });
    local.push(node);
    const name = uniqueName('real');
    const queue = uniqueQueue('real');
    ok(await request(nc2, 'schedule.put', { name, job: { queue }, cron: '* * * * * *', overlap: 'allow_all' }));
    await until(node, () => scheduleOf(node, name).context.fired_count >= 3, 'three fires in real time', 10_000);
    ok(await request(nc2, 'schedule.delete', { name }));
    const fired = (await sysEventsOf(name)).filter((e) => e.type === 'schedule.fired');
    const ticks = fired.map((e) => Date.parse(e.data['tick'] as string));
    for (const [i, tick] of ticks.entries()) {
      expect(tick % 1_000).toBe(0);
      if (i > 0) expect(tick - ticks[i - 1]!).toBe(1_000);
      const jobId = scheduledJobId(name, tickAt(tick));
      expect(fired[i]!.data['job_id']).toBe(jobId);
      await until(node, () => node.store.get(jobId) !== undefined, `the job of ${tickAt(tick)}`);
    }
    await stop(node);
  });

  test('a checkpoint holds schedules and templates: a node restarted from it goes on firing where the log left off', async () => {
    const { mkdtemp, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const dataDir = await mkdtemp(join(tmpdir(), 'docket-sched-'));
    const clk = new ManualClock(Date.parse('2026-05-04T15:00:00.000Z'));
    let node = await startTrackedNode(server2, { clock: clk, nodeName: 'ckpt-a', dataDir, leadershipLeaseMs: 1_500 });
    local.push(node);
    const name = uniqueName('ckpt');
    const template = uniqueName('ckpt-tpl');
    const queue = uniqueQueue('ckpt');
    ok(await request(nc2, 'template.put', { name: template, queue, params: { k: 1 } }));
    ok(await request(nc2, 'schedule.put', { name, template, cron: '* * * * * *', overlap: 'allow_all' }));
    const t0 = clk.now();
    clk.advance(1_000);
    await until(node, () => node.store.get(scheduledJobId(name, tickAt(t0 + 1_000))) !== undefined, 'the first fire');
    await stop(node);
    node = await startTrackedNode(server2, { clock: clk, nodeName: 'ckpt-a', dataDir, leadershipLeaseMs: 1_500 });
    local.push(node);
    expect(scheduleOf(node, name).context.fired_count).toBe(1);
    expect(node.aggregates.stateOf('template', template).value).toBe('active');
    clk.advance(1_000);
    const second = scheduledJobId(name, tickAt(t0 + 2_000));
    await until(node, () => node.store.get(second) !== undefined, 'the fire after the restart');
    expect(node.store.get(second)!.state.job.context.params).toEqual({ k: 1 });
    ok(await request(nc2, 'schedule.delete', { name }));
    await stop(node);
    await rm(dataDir, { recursive: true, force: true });
  });

  /** A schedule's cron fires' ticks and its misses, in log order. */
  async function handledTicks(name: string): Promise<{ fired: string[]; missed: string[] }> {
    const fired: string[] = [];
    const missed: string[] = [];
    for (const e of await sysEventsOf(name)) {
      if (e.type === 'schedule.fired' && (e.data['trigger'] ?? 'cron') === 'cron') fired.push(e.data['tick'] as string);
      if (e.type === 'schedule.missed') missed.push(JSON.stringify(e.data));
    }
    return { fired, missed };
  }
});

describe('the audit', () => {
  test('the whole log of this file\'s first server is clean: every schedule and template event legal for its machine', async () => {
    const { auditMessages } = await import('../../src/audit/index.js');
    const messages = [];
    for await (const m of readLog(nc, {})) messages.push(m);
    const report = auditMessages(messages);
    expect(report.violations).toEqual([]);
    expect(report.otherEvents).toBeGreaterThan(0);
  });
});
