/**
 * What a fire appends (src/schedules/fire.ts), from folded schedule and template state: events
 * the machine accepts, jobs with ids derived from (schedule, tick), params merged over the
 * template's, misses when the template is archived, the live job named for cancel_other, a
 * manual trigger's own id, and a backfill that skips ticks whose job exists.
 */
import { describe, expect, test } from 'vitest';
import type { ScheduleEvent } from '../../machines/schedule.events.js';
import { evolveSchedule, INITIAL_SCHEDULE_STATE, type ScheduleState } from '../../machines/schedule.machine.js';
import type { TemplateEvent } from '../../machines/template.events.js';
import { evolveTemplate, INITIAL_TEMPLATE_STATE, type TemplateState } from '../../machines/template.machine.js';
import { scheduledJobId, triggeredJobId } from '../../src/ids.js';
import { backfillFires, tickSchedule, triggerFire, type ScheduleEventData } from '../../src/schedules/fire.js';
import { BASE_MS, schedulePut, scheduleEvent, sec, templateEvent, templatePut } from '../support/schedule-arbitraries.js';

function fold<S, E>(evolve: (s: S, e: E) => S | null, initial: S, events: readonly E[]): S {
  return events.reduce((s, e) => {
    const next = evolve(s, e);
    if (next === null) throw new Error('refused');
    return next;
  }, initial);
}

const template = (...extra: TemplateEvent[]): TemplateState =>
  fold(evolveTemplate, INITIAL_TEMPLATE_STATE, [templateEvent('template.put', templatePut(1, { params: { format: 'pdf', pages: 10 }, priority: 3, lease_ms: 60_000 }), sec(0)), ...extra]);

const schedule = (overrides: Parameters<typeof schedulePut>[1] = {}, ...extra: ScheduleEvent[]): ScheduleState =>
  fold(evolveSchedule, INITIAL_SCHEDULE_STATE, [scheduleEvent('schedule.put', schedulePut(1, { params: { pages: 2 }, ...overrides }), sec(0)), ...extra]);

/** The events appended, as the ticker would: each must be accepted in order. */
function apply(state: ScheduleState, events: readonly ScheduleEventData[], at: number): ScheduleState {
  return fold(evolveSchedule, state, events.map((e) => scheduleEvent(e.type, e.data as never, new Date(at).toISOString())));
}

describe('tickSchedule', () => {
  test('fires the due ticks with derived job ids; params merged over the template\'s; the events are accepted', () => {
    const s = schedule();
    const now = BASE_MS + 25_000;
    const r = tickSchedule({ schedule: s, template: template(), now, upSince: BASE_MS, isJobLive: () => false });
    expect(r.events.map((e) => e.type)).toEqual(['schedule.fired', 'schedule.fired']);
    expect(r.jobs).toEqual([10, 20].map((n) => ({
      job_id: scheduledJobId('nightly', sec(n)),
      queue: 'reports',
      params: { format: 'pdf', pages: 2 },
      priority: 3,
      lease_ms: 60_000,
      schedule: 'nightly',
      tick: sec(n),
      trigger: 'cron',
      due_at: sec(n),
      template: { name: 'report', revision: 1 },
    })));
    const after = apply(s, r.events, now);
    expect(after.context.handled_until).toBe(sec(20));
    // The same run again fires nothing: the ticks are handled.
    expect(tickSchedule({ schedule: after, template: template(), now, upSince: BASE_MS, isJobLive: () => false }).events).toEqual([]);
  });

  test('an archived template: every due tick is missed (archived_template), no job', () => {
    const r = tickSchedule({ schedule: schedule(), template: template(templateEvent('template.archived', {}, sec(1))), now: BASE_MS + 25_000, upSince: BASE_MS, isJobLive: () => false });
    expect(r.jobs).toEqual([]);
    expect(r.events).toEqual([10, 20].map((n) => ({ type: 'schedule.missed', data: { tick: sec(n), reason: 'archived_template' } })));
  });

  test('overlap: the last fire\'s job is asked about; cancel_other names it to cancel', () => {
    const lastJob = scheduledJobId('nightly', sec(10));
    const fired = scheduleEvent('schedule.fired', { tick: sec(10), job_id: lastJob }, sec(10));
    const asked: string[] = [];
    const r = tickSchedule({ schedule: schedule({ overlap: 'cancel_other' }, fired), template: template(), now: BASE_MS + 20_000, upSince: BASE_MS, isJobLive: (id) => (asked.push(id), true) });
    expect(asked).toEqual([lastJob]);
    expect(r.cancel).toBe(lastJob);
    expect(r.jobs.map((j) => j.tick)).toEqual([sec(20)]);
    const skip = tickSchedule({ schedule: schedule({ overlap: 'skip' }, fired), template: template(), now: BASE_MS + 20_000, upSince: BASE_MS, isJobLive: () => true });
    expect(skip.events).toEqual([{ type: 'schedule.missed', data: { tick: sec(20), reason: 'overlap' } }]);
  });

  test('a schedule with its own job and no template; a disabled schedule does nothing', () => {
    const own = schedule({ template: null, job: { queue: 'mail', params: { to: 'ops', pages: 1 }, max_attempts: 3 } });
    const r = tickSchedule({ schedule: own, template: null, now: BASE_MS + 10_000, upSince: BASE_MS, isJobLive: () => false });
    expect(r.jobs).toEqual([{ job_id: scheduledJobId('nightly', sec(10)), queue: 'mail', params: { to: 'ops', pages: 2 }, max_attempts: 3, schedule: 'nightly', tick: sec(10), trigger: 'cron', due_at: sec(10), template: null }]);
    const disabled = schedule({}, scheduleEvent('schedule.disabled', { note: null }, sec(1)));
    expect(tickSchedule({ schedule: disabled, template: template(), now: BASE_MS + 60_000, upSince: BASE_MS, isJobLive: () => false }).events).toEqual([]);
  });
});

describe('fire ahead (aheadMs)', () => {
  const lastJob = scheduledJobId('nightly', sec(10));
  const fired = scheduleEvent('schedule.fired', { tick: sec(10), job_id: lastJob }, sec(10));
  const ahead = (overrides: Parameters<typeof schedulePut>[1], live: boolean, now = BASE_MS + 19_600) =>
    tickSchedule({ schedule: schedule(overrides, fired), template: template(), now, upSince: BASE_MS, isJobLive: () => live, aheadMs: 500 });

  test('allow_all decides a tick within the lead before it is due; its job is due at the tick', () => {
    const r = ahead({ overlap: 'allow_all' }, true);
    expect(r.events).toEqual([{ type: 'schedule.fired', data: { tick: sec(20), job_id: scheduledJobId('nightly', sec(20)) } }]);
    expect(r.jobs.map((j) => j.due_at)).toEqual([sec(20)]);
    expect(r.plan.nextDueAt).toBe(BASE_MS + 30_000);
    // Outside the lead nothing is decided yet.
    expect(ahead({ overlap: 'allow_all' }, true, BASE_MS + 19_400).events).toEqual([]);
    // Without a lead, nothing before its due time.
    expect(tickSchedule({ schedule: schedule({ overlap: 'allow_all' }, fired), template: template(), now: BASE_MS + 19_600, upSince: BASE_MS, isJobLive: () => true }).events).toEqual([]);
  });

  test('another overlap policy fires ahead only when the previous job has ended and there is no jitter', () => {
    expect(ahead({ overlap: 'skip' }, false).jobs.map((j) => j.tick)).toEqual([sec(20)]);
    expect(ahead({ overlap: 'cancel_other' }, false).cancel).toBeNull();
    // A live previous job: the tick waits for its due time, where the policy decides it.
    for (const overlap of ['skip', 'buffer_one', 'buffer_all', 'cancel_other'] as const) {
      const r = ahead({ overlap }, true);
      expect(r.events).toEqual([]);
      expect(r.plan.nextDueAt).toBe(BASE_MS + 20_000);
    }
    expect(ahead({ overlap: 'skip', jitter_ms: 100 }, false).events).toEqual([]);
  });
});

describe('trigger and backfill', () => {
  test('a manual trigger fires at now with an id from its command id, accepted without touching the cron\'s ticks', () => {
    const s = schedule();
    const fire = triggerFire(s, template(), 'cmd-7', BASE_MS + 15_500)!;
    expect(fire.event).toEqual({ type: 'schedule.fired', data: { tick: '2030-01-01T00:00:15.500Z', job_id: triggeredJobId('nightly', 'cmd-7'), trigger: 'manual' } });
    const after = apply(s, [fire.event], BASE_MS + 15_500);
    expect(after.context.handled_until).toBe(sec(0));
    expect(triggerFire(s, template(templateEvent('template.archived', {}, sec(1))), 'cmd-8', BASE_MS)).toBeNull();
  });

  test('a backfill fires each past tick once: a tick whose job exists is skipped', () => {
    const s = schedule({}, scheduleEvent('schedule.fired', { tick: sec(40), job_id: scheduledJobId('nightly', sec(40)) }, sec(40)));
    const existing = new Set([scheduledJobId('nightly', sec(20))]);
    const r = backfillFires(s, template(), [sec(10), sec(20), sec(30)], (id) => existing.has(id));
    expect(r.skipped).toEqual([sec(20)]);
    expect(r.events.map((e) => e.data)).toEqual([
      { tick: sec(10), job_id: scheduledJobId('nightly', sec(10)), trigger: 'backfill' },
      { tick: sec(30), job_id: scheduledJobId('nightly', sec(30)), trigger: 'backfill' },
    ]);
    expect(apply(s, r.events, BASE_MS + 50_000).context.fired_count).toBe(3);
  });
});
