/**
 * The ticker's passes and fire ahead (src/reactors/schedule-ticker.ts) through a real
 * nats-server: a pass firing hundreds of schedules at one instant commits one fire per
 * (schedule, tick), group-committed, and submits their jobs as a batch; a tick is decided
 * FIRE_AHEAD_MS before it is due only when no decision could differ (allow_all, or the previous
 * job ended), its job due at the tick; a disable within the lead leaves the fire decided ahead;
 * and a sys leader SIGKILLed mid-pass (a real child process) fires no tick twice and loses no job.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { ScheduleContext } from '../../machines/index.js';
import { auditMessages, type RecordedMessage } from '../../src/audit/index.js';
import { ManualClock } from '../../src/clock.js';
import { scheduledJobId } from '../../src/ids.js';
import type { DocketNode } from '../../src/node.js';
import { FIRE_AHEAD_MS } from '../../src/reactors/schedule-ticker.js';
import { readLog } from '../../src/store/read-log.js';
import { closeTestFile, connectTestClients, request, okReply as ok, startTrackedNode, uniqueQueue, untilFolded } from '../support/docket.js';
import { startDocketProcess, type DocketProcess } from '../support/docket-process.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let nc: NatsConnection;
let client: Awaited<ReturnType<typeof connectTestClients>>['client'];
const nodes: DocketNode[] = [];
// On a whole second, so every-second ticks are exact.
const clock = new ManualClock(Date.parse('2026-06-01T08:00:00.000Z'));
let serial = 0;
const uniqueName = (base: string) => `${base}-${++serial}-${process.pid}`;
const tickAt = (ms: number) => new Date(ms).toISOString();

beforeAll(async () => {
  server = await startNatsServer();
  nodes.push(await startTrackedNode(server, { clock, nodeName: 'pass-a' }));
  ({ client, nc } = await connectTestClients(server, 'schedule-passes-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes, server });
});

/** untilFolded with this file's deadline (passes of many schedules on a loaded machine). */
const until = (node: DocketNode, check: () => boolean, what: string, ms = 15_000): Promise<void> => untilFolded(node, check, what, ms);


interface LoggedEvent {
  readonly type: string;
  readonly time: string;
  readonly aggregate: { readonly kind: string; readonly id: string };
  readonly data: Record<string, unknown>;
}

/** Every commit of the log (or of one subject filter), decoded, with its message. */
async function commits(conn: NatsConnection, filter?: string): Promise<{ seq: number; subject: string; events: LoggedEvent[]; message: RecordedMessage }[]> {
  const out: { seq: number; subject: string; events: LoggedEvent[]; message: RecordedMessage }[] = [];
  for await (const m of readLog(conn, filter === undefined ? {} : { filter })) {
    const commit = JSON.parse(new TextDecoder().decode(m.data)) as { events: LoggedEvent[] };
    out.push({ seq: m.seq, subject: m.subject, events: commit.events, message: m });
  }
  return out;
}

async function putMany(conn: NatsConnection, names: readonly string[], body: (name: string) => Record<string, unknown>): Promise<void> {
  for (let i = 0; i < names.length; i += 50) await Promise.all(names.slice(i, i + 50).map(async (name) => ok(await request(conn, 'schedule.put', body(name)))));
}

const scheduleOf = (node: DocketNode, name: string) => node.aggregates.stateOf<ScheduleContext>('schedule', name);

describe('a pass', () => {
  test('300 schedules due at one instant: one fire per (schedule, tick), group-committed, and their jobs submitted as one batch', { timeout: 60_000 }, async () => {
    const node = nodes[0]!;
    const queue = uniqueQueue('pass');
    const names = Array.from({ length: 300 }, (_, i) => uniqueName(`pass${i}`));
    await putMany(nc, names, (name) => ({ name, job: { queue }, cron: '* * * * * *', overlap: 'allow_all' }));
    const start = clock.now();
    for (let i = 1; i <= 3; i++) {
      clock.advance(1_000);
      const tick = tickAt(start + i * 1_000);
      await until(node, () => names.every((name) => node.store.get(scheduledJobId(name, tick)) !== undefined), `the 300 jobs of tick ${i}`);
    }
    for (const name of names) ok(await request(nc, 'schedule.delete', { name }));

    const mine = new Set(names);
    const firesPer = new Map<string, number>();
    const fireCommitsOfTick = new Map<string, Set<number>>();
    for (const commit of await commits(nc, 'docket.log.sys')) {
      for (const e of commit.events) {
        if (e.type !== 'schedule.fired' || !mine.has(e.aggregate.id)) continue;
        const tick = e.data['tick'] as string;
        const key = `${e.aggregate.id} ${tick}`;
        firesPer.set(key, (firesPer.get(key) ?? 0) + 1);
        expect(e.data['job_id']).toBe(scheduledJobId(e.aggregate.id, tick));
        const seqs = fireCommitsOfTick.get(tick) ?? new Set<number>();
        fireCommitsOfTick.set(tick, seqs.add(commit.seq));
      }
    }
    // One fire per (schedule, tick): 300 schedules × 3 ticks, none twice.
    expect(firesPer.size).toBe(900);
    expect([...firesPer.values()].every((n) => n === 1)).toBe(true);
    // A pass's fires go to the writer together: a handful of commits per tick, not one per schedule.
    expect(fireCommitsOfTick.size).toBe(3);
    for (const seqs of fireCommitsOfTick.values()) expect(seqs.size).toBeLessThanOrEqual(3);
    // Their jobs: one batch per queue per pass, so a handful of commits per tick too.
    const jobCommitsOfTick = new Map<string, Set<number>>();
    for (const commit of await commits(nc, `docket.log.q.${queue}`)) {
      for (const e of commit.events) {
        if (e.type !== 'job.submitted') continue;
        const tick = (e.data['schedule'] as { tick: string }).tick;
        jobCommitsOfTick.set(tick, (jobCommitsOfTick.get(tick) ?? new Set<number>()).add(commit.seq));
      }
    }
    expect(jobCommitsOfTick.size).toBe(3);
    for (const seqs of jobCommitsOfTick.values()) expect(seqs.size).toBeLessThanOrEqual(3);
  });
});

describe('fire ahead', () => {
  test('allow_all (and a schedule whose last job ended) decide a tick within the lead, its job due at the tick; a live job makes the tick wait for its due time', { timeout: 30_000 }, async () => {
    const node = nodes[0]!;
    const queue = uniqueQueue('ahead');
    const all = uniqueName('ahead-all');
    const skip = uniqueName('ahead-skip');
    ok(await request(nc, 'schedule.put', { name: all, job: { queue }, cron: '* * * * * *', overlap: 'allow_all' }));
    ok(await request(nc, 'schedule.put', { name: skip, job: { queue }, cron: '* * * * * *', overlap: 'skip' }));
    const s = clock.now();
    const jobOf = (name: string, at: number) => node.store.get(scheduledJobId(name, tickAt(at)));

    // Within the lead of S+1s: both decided now (skip has no previous job), each job due at its tick.
    clock.advance(1_000 - FIRE_AHEAD_MS + 100);
    await until(node, () => jobOf(all, s + 1_000) !== undefined && jobOf(skip, s + 1_000) !== undefined, 'the jobs of S+1s, ahead');
    expect(clock.now()).toBeLessThan(s + 1_000);
    for (const name of [all, skip]) {
      const job = jobOf(name, s + 1_000)!;
      expect(job.state.job.context.run_at).toBe(tickAt(s + 1_000));
      expect(job.state.job.value).toBe('queued');
      expect(node.queueOrder.isDelayed(queue, job.jobId)).toBe(true);
    }

    // Within the lead of S+2s: allow_all fires ahead; skip's last job is live, so its tick waits to be due.
    clock.advance(1_000);
    await until(node, () => jobOf(all, s + 2_000) !== undefined, 'allow_all\'s job of S+2s, ahead');
    expect(scheduleOf(node, skip).context.handled_until).toBe(tickAt(s + 1_000));
    clock.advance(FIRE_AHEAD_MS - 100);
    await until(node, () => scheduleOf(node, skip).context.missed_count === 1, 'skip\'s tick S+2s missed (overlap) at its due time');
    expect(jobOf(skip, s + 2_000)).toBeUndefined();

    // Its job ended: the next tick may be decided ahead again.
    ok(await request(nc, 'cancel', { job_id: scheduledJobId(skip, tickAt(s + 1_000)) }));
    clock.advance(1_000 - FIRE_AHEAD_MS + 100);
    await until(node, () => jobOf(skip, s + 3_000) !== undefined, 'skip\'s job of S+3s, ahead once the last job ended');
    expect(clock.now()).toBeLessThan(s + 3_000);

    // A disable within the lead: the tick decided ahead stands (fired before the disable); nothing after it fires.
    await until(node, () => jobOf(all, s + 3_000) !== undefined, 'allow_all\'s job of S+3s');
    ok(await request(nc, 'schedule.disable', { name: all, note: 'within the lead' }));
    clock.advance(2_000);
    ok(await request(nc, 'schedule.delete', { name: skip }));
    const events = (await commits(nc, 'docket.log.sys')).flatMap((c) => c.events).filter((e) => e.aggregate.id === all);
    const types = events.map((e) => (e.type === 'schedule.fired' ? `fired ${e.data['tick'] as string}` : e.type));
    expect(types).toEqual(['schedule.put', `fired ${tickAt(s + 1_000)}`, `fired ${tickAt(s + 2_000)}`, `fired ${tickAt(s + 3_000)}`, 'schedule.disabled']);
    // The fires decided ahead were written before their ticks (the event's time is the decision's).
    for (const e of events.filter((x) => x.type === 'schedule.fired')) expect(Date.parse(e.time)).toBeLessThan(Date.parse(e.data['tick'] as string));
    expect(scheduleOf(node, all).value).toBe('disabled');

    const report = auditMessages((await commits(nc)).map((c) => c.message));
    expect(report.violations).toEqual([]);
  });
});

describe('a sys leader killed mid-pass (child processes)', () => {
  let server2: TestNatsServer;
  const dirs: string[] = [];
  const procs: DocketProcess[] = [];

  beforeAll(async () => {
    server2 = await startNatsServer();
  });

  afterAll(async () => {
    for (const p of procs) await p.kill('SIGKILL');
    await server2?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  async function startProc(): Promise<DocketProcess> {
    const dataDir = mkdtempSync(join(tmpdir(), 'docket-pass-kill-'));
    dirs.push(dataDir);
    const p = await startDocketProcess({ server: server2.url, dataDir });
    procs.push(p);
    return p;
  }

  test('SIGKILL right after a pass commits its fires: the other node takes over; no tick fires twice, every fire has its job, the audit is clean', { timeout: 120_000 }, async () => {
    const a = await startProc();
    const { client: c2, nc: nc2 } = await connectTestClients(server2, 'schedule-passes-kill');
    try {
      const queue = uniqueQueue('kill');
      const names = Array.from({ length: 200 }, (_, i) => uniqueName(`kill${i}`));
      // catch-up all: the ticks due while no node leads are fired too, so every tick from the first fire on is fired.
      await putMany(nc2, names, (name) => ({ name, job: { queue }, cron: '* * * * * *', overlap: 'allow_all', catchup: 'all' }));
      const b = await startProc();
      // The node that put the schedules leads sys (the first command made it leader); b follows.
      // Kill a at the first sys commit of fires seen from here on: its jobs are then on their way.
      const sub = nc2.subscribe('docket.log.sys');
      for await (const m of sub) {
        if (new TextDecoder().decode(m.data).includes('"schedule.fired"')) {
          await a.kill('SIGKILL');
          break;
        }
      }
      sub.unsubscribe();
      const killedAt = Date.now();
      // b takes over once a's lease lapses, then fires (and resubmits) on its own: wait until
      // every schedule has a job of a tick after the takeover (after its catch-up, a schedule's
      // ticks may land in a pass of their own, so the first such job does not speak for all).
      const later = Math.ceil((killedAt + 8_000) / 1_000) * 1_000;
      const stream = c2.events({ queue, types: ['job.submitted'], from: 'all' })[Symbol.asyncIterator]() as AsyncIterator<{ event: { data: { schedule?: { name: string; tick: string } } } }>;
      const firedLater = new Set<string>();
      while (firedLater.size < names.length) {
        const next = await stream.next();
        if (next.done) throw new Error('the event stream ended');
        const schedule = next.value.event.data.schedule;
        if (schedule !== undefined && Date.parse(schedule.tick) >= later) firedLater.add(schedule.name);
      }
      await stream.return?.();
      // Stop the fires (b leads now), then give b's last pass time to deliver its jobs: only a's
      // death is under test, not b's. A read of the log until every fire has its job, or 20 s.
      for (let i = 0; i < names.length; i += 50) await Promise.all(names.slice(i, i + 50).map(async (name) => ok(await request(nc2, 'schedule.delete', { name }))));
      const jobsOfFires = async () => {
        const log = await commits(nc2);
        const fired = log.flatMap((c) => c.events.filter((e) => e.type === 'schedule.fired').map((e) => e.data['job_id'] as string));
        const submitted = new Set(log.flatMap((c) => c.events.filter((e) => e.type === 'job.submitted').map((e) => e.aggregate.id)));
        return fired.every((id) => submitted.has(id));
      };
      for (const deadline = Date.now() + 20_000; Date.now() < deadline && !(await jobsOfFires()); ) await new Promise((resolve) => setTimeout(resolve, 250));
      await b.kill('SIGKILL');

      const all = await commits(nc2);
      const mine = new Set(names);
      const fires = new Map<string, number>();
      const jobs = new Set<string>();
      const missed: string[] = [];
      for (const commit of all) {
        for (const e of commit.events) {
          if (e.type === 'job.submitted') jobs.add(e.aggregate.id);
          if (e.aggregate.kind !== 'schedule' || !mine.has(e.aggregate.id)) continue;
          if (e.type === 'schedule.fired') {
            const key = `${e.aggregate.id} ${e.data['tick'] as string}`;
            fires.set(key, (fires.get(key) ?? 0) + 1);
          }
          if (e.type === 'schedule.missed') missed.push(e.aggregate.id);
        }
      }
      // No tick twice.
      expect([...fires.values()].every((n) => n === 1)).toBe(true);
      // No job lost: every fire's job is in the log under its derived id.
      const lost = [...fires.keys()].filter((key) => {
        const [name, tick] = key.split(' ') as [string, string];
        return !jobs.has(scheduledJobId(name, tick));
      });
      expect(lost).toEqual([]);
      // catch-up all and allow_all: nothing missed; each schedule's fires are consecutive seconds through the takeover.
      expect(missed).toEqual([]);
      for (const name of names) {
        const ticks = [...fires.keys()].filter((k) => k.startsWith(`${name} `)).map((k) => Date.parse(k.split(' ')[1]!)).sort((x, y) => x - y);
        expect(ticks.at(-1)! - ticks[0]!).toBe((ticks.length - 1) * 1_000);
        expect(ticks.at(-1)!).toBeGreaterThanOrEqual(later);
      }
      expect(auditMessages(all.map((c) => c.message)).violations).toEqual([]);
    } finally {
      await c2.close();
      await nc2.drain();
    }
  });
});
