/**
 * The audit's schedule rules on forged logs (src/audit/schedule-audit.ts): every settled fire's
 * job exists (`fire_without_job`, else pending), a fire of a disabled or deleted schedule is named
 * (`illegal_transition`), and every tick due while the sys leader was up is fired or missed with
 * a reason that holds (`tick_coverage`).
 */
import { describe, expect, test } from 'vitest';
import { auditMessages, AuditRules, type AuditReport } from '../../src/audit/index.js';
import { FIRE_SETTLE_MS, UP_GRACE_MS } from '../../src/audit/schedule-audit.js';
import { scheduledJobId } from '../../src/ids.js';
import type { SchedulePutData } from '../../machines/index.js';
import { History, T0, toRecorded } from '../support/audit-log.js';
import { SCHEDULE, schedulePut, scheduleEvent, sec, templateEvent, templatePut } from '../support/schedule-arbitraries.js';

function audit(h: History): AuditReport {
  return auditMessages(toRecorded(h.entries));
}

const summary = (report: AuditReport) => report.violations.map((v) => [v.seq, v.rule, v.aggregate]);
const jobOf = (tick: string) => scheduledJobId(SCHEDULE, tick);

/** A sys history: a schedule every 10 s (its own job in queue `reports`) put at 0 s by node n1, epoch 1. */
function scheduled(overrides: Partial<SchedulePutData> = {}): History {
  const h = new History('sched', T0);
  h.raw('sys', scheduleEvent('schedule.put', schedulePut(1, { template: null, job: { queue: 'reports' }, ...overrides }), sec(0)));
  return h;
}

const fire = (tick: number, time = tick) => scheduleEvent('schedule.fired', { tick: sec(tick), job_id: jobOf(sec(tick)) }, sec(time));

/** Submits the job of the fire of `tick`, at `time` s. */
function submitted(h: History, tick: number, time: number): void {
  h.nowMs = T0 + time * 1000 - 1000;
  h.submit('reports', jobOf(sec(tick)));
}

describe("every fire's job exists with its derived id", () => {
  test('a fire whose job follows is clean; one whose queue committed long after without it is fire_without_job; a recent one is pending', () => {
    const h = scheduled();
    h.raw('sys', fire(10));
    submitted(h, 10, 10);
    expect(audit(h).violations).toEqual([]);

    h.raw('sys', fire(20));
    // The queue's partition commits 5 s after the fire: too soon to judge.
    h.nowMs = T0 + 24_000;
    h.submit('reports', 'unrelated-1');
    const early = audit(h);
    expect(early.violations).toEqual([]);
    expect(early.pendingFires).toBe(1);

    // ... and again past FIRE_SETTLE_MS, still without the job: settled, and missing.
    h.nowMs = T0 + 20_000 + FIRE_SETTLE_MS;
    h.submit('reports', 'unrelated-2');
    const late = audit(h);
    expect(late.pendingFires).toBe(0);
    expect(summary(late)).toEqual([[4, AuditRules.FireWithoutJob, `schedule:${SCHEDULE}`]]);
    expect(late.violations[0]!.message).toContain(jobOf(sec(20)));
  });

  test("a template's queue is where the job is looked for; other queues' commits settle nothing", () => {
    const h = new History('tmpl', T0);
    h.raw('sys', templateEvent('template.put', templatePut(1, { queue: 'reports' }), sec(0)));
    h.raw('sys', scheduleEvent('schedule.put', schedulePut(1), sec(0)));
    h.raw('sys', fire(10));
    h.nowMs = T0 + 60_000;
    h.submit('elsewhere', 'x1');
    expect(audit(h)).toMatchObject({ ok: true, pendingFires: 1 });
    h.submit('reports', 'x2');
    expect(summary(audit(h))).toEqual([[3, AuditRules.FireWithoutJob, `schedule:${SCHEDULE}`]]);
  });
});

describe('no fire of a disabled or deleted schedule', () => {
  test('the Schedule machine refuses it: illegal_transition naming the schedule and the state', () => {
    const h = scheduled();
    h.raw('sys', scheduleEvent('schedule.disabled', { note: 'maintenance' }, sec(5)));
    h.raw('sys', fire(10));
    h.raw('sys', scheduleEvent('schedule.deleted', {}, sec(12)));
    h.raw('sys', fire(20));
    const report = audit(h);
    expect(summary(report)).toEqual([
      [3, AuditRules.IllegalTransition, `schedule:${SCHEDULE}`],
      [5, AuditRules.IllegalTransition, `schedule:${SCHEDULE}`],
    ]);
    expect(report.violations[0]!.message).toContain('in state disabled');
    expect(report.violations[1]!.message).toContain('in state deleted');
  });
});

describe('every due tick while the sys leader was up is fired or missed with a reason', () => {
  test('a tick skipped between two handled ticks is named at the later one', () => {
    const h = scheduled();
    h.raw('sys', fire(10));
    h.raw('sys', fire(30)); // 20 neither fired nor missed
    h.raw('sys', scheduleEvent('schedule.missed', { tick: sec(40), reason: 'overlap' }, sec(40)));
    const report = audit(h);
    expect(summary(report)).toEqual([[3, AuditRules.TickCoverage, `schedule:${SCHEDULE}`]]);
    expect(report.violations[0]!.message).toContain(`1 tick from ${sec(20)}`);
  });

  test('a capped miss counts exactly the ticks from `from` to `to`', () => {
    const h = scheduled();
    h.raw('sys', scheduleEvent('schedule.missed', { from: sec(10), to: sec(50), count: 5, reason: 'paused' }, sec(55)));
    expect(audit(h).violations).toEqual([]);
    h.raw('sys', scheduleEvent('schedule.missed', { from: sec(60), to: sec(90), count: 3, reason: 'paused' }, sec(95)));
    const report = audit(h);
    expect(summary(report)).toEqual([[3, AuditRules.TickCoverage, `schedule:${SCHEDULE}`]]);
    expect(report.violations[0]!.message).toContain('counts 3 ticks, but the spec');
  });

  test('ticks missed as catchup while a leader was up are named; ticks after its last commit are not', () => {
    const down = scheduled();
    down.raw('sys', fire(10));
    down.raw('sys', fire(20));
    // Epoch 1 stops at 20 s; epoch 2 starts at 70 s and misses what fell between.
    down.raw('sys', scheduleEvent('schedule.missed', { from: sec(30), to: sec(60), count: 4, reason: 'catchup' }, sec(70)), { node: 'n2', epoch: 2 });
    down.raw('sys', fire(70), { node: 'n2', epoch: 2 });
    expect(audit(down).violations).toEqual([]);

    const up = scheduled();
    up.raw('sys', fire(10));
    up.raw('sys', fire(20));
    // Epoch 1 went on committing (a template put) until 60 s: ticks 30..50 came due while it was up.
    up.raw('sys', templateEvent('template.put', templatePut(1), sec(60)));
    up.raw('sys', scheduleEvent('schedule.missed', { from: sec(30), to: sec(60), count: 4, reason: 'catchup' }, sec(70)), { node: 'n2', epoch: 2 });
    const report = audit(up);
    expect(summary(report)).toEqual([[5, AuditRules.TickCoverage, `schedule:${SCHEDULE}`]]);
    expect(report.violations[0]!.message).toContain(`3 ticks from ${sec(30)} missed as catchup`);
  });

  test("an enabled schedule's tick left unhandled to the end of the log while the leader went on committing is named", () => {
    const h = scheduled();
    h.raw('sys', fire(10));
    h.raw('sys', fire(20));
    // Tick 30 is due; the leader commits again before UP_GRACE_MS has passed: no evidence yet.
    h.raw('sys', templateEvent('template.put', templatePut(1), sec(30 + UP_GRACE_MS / 1000 - 1)));
    expect(audit(h).violations).toEqual([]);
    h.raw('sys', templateEvent('template.put', templatePut(2), sec(30 + UP_GRACE_MS / 1000)));
    const report = audit(h);
    expect(summary(report)).toEqual([[5, AuditRules.TickCoverage, `schedule:${SCHEDULE}`]]);
    expect(report.violations[0]!.message).toContain(`tick ${sec(30)} came due`);
  });

  test('a tick held back by buffer_one while the last fire\'s job runs is not unhandled; a disabled schedule has no due ticks', () => {
    const h = scheduled({ overlap: 'buffer_one' });
    h.raw('sys', fire(10));
    submitted(h, 10, 10);
    h.claim(jobOf(sec(10)), { time: sec(11) });
    h.raw('sys', templateEvent('template.put', templatePut(1), sec(60)));
    expect(audit(h).violations).toEqual([]);

    const disabled = scheduled();
    disabled.raw('sys', scheduleEvent('schedule.disabled', { note: null }, sec(5)));
    disabled.raw('sys', templateEvent('template.put', templatePut(1), sec(60)));
    expect(audit(disabled).violations).toEqual([]);
  });
});
