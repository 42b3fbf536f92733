/**
 * The Template and Schedule machines, given events, when a candidate, then accepted (with the
 * state it leads to) or refused (with the reason a user reads).
 */
import { describe, expect, test } from 'vitest';
import type { ScheduleEvent } from '../../machines/schedule.events.js';
import { decideSchedule, evolveSchedule, INITIAL_SCHEDULE_STATE, type ScheduleState } from '../../machines/schedule.machine.js';
import type { TemplateEvent } from '../../machines/template.events.js';
import { decideTemplate, evolveTemplate, INITIAL_TEMPLATE_STATE, type TemplateState } from '../../machines/template.machine.js';
import { schedulePut, scheduleEvent, sec, templateEvent, templatePut } from '../support/schedule-arbitraries.js';

function givenSchedule(events: readonly ScheduleEvent[]): ScheduleState {
  return events.reduce<ScheduleState>((state, e) => {
    const next = evolveSchedule(state, e);
    if (next === null) throw new Error(`given: ${e.type} refused in ${state.value}`);
    return next;
  }, INITIAL_SCHEDULE_STATE);
}

function givenTemplate(events: readonly TemplateEvent[]): TemplateState {
  return events.reduce<TemplateState>((state, e) => {
    const next = evolveTemplate(state, e);
    if (next === null) throw new Error(`given: ${e.type} refused in ${state.value}`);
    return next;
  }, INITIAL_TEMPLATE_STATE);
}

const put1 = scheduleEvent('schedule.put', schedulePut(1), sec(5));
const fired = (tick: string, trigger?: 'cron' | 'manual' | 'backfill') =>
  scheduleEvent('schedule.fired', trigger === undefined ? { tick, job_id: `job-${tick}` } : { tick, job_id: `job-${tick}-${trigger}`, trigger }, tick);

describe('template', () => {
  test('put makes revision 1 active; the next put must be revision 2; archive; a put revives it as revision 3', () => {
    let state = givenTemplate([templateEvent('template.put', templatePut(1), sec(1))]);
    expect(state.value).toBe('active');
    expect(state.context).toMatchObject({ name: 'report', revision: 1, created_at: sec(1), archived_at: null });

    const again = decideTemplate(state, templateEvent('template.put', templatePut(1)));
    expect(again).toEqual({ ok: false, code: 'invalid_transition', reason: 'cannot put template report as revision 1: its next revision is 2' });

    state = givenTemplate([templateEvent('template.put', templatePut(1), sec(1)), templateEvent('template.put', templatePut(2, { params: { format: 'csv' } }), sec(2)), templateEvent('template.archived', {}, sec(3))]);
    expect(state.value).toBe('archived');
    expect(state.context).toMatchObject({ revision: 2, created_at: sec(1), archived_at: sec(3), spec: { params: { format: 'csv' } } });
    expect(decideTemplate(state, templateEvent('template.archived', {}))).toMatchObject({ ok: false, reason: 'cannot archive template report: it is already archived' });

    const revived = evolveTemplate(state, templateEvent('template.put', templatePut(3), sec(4)));
    expect(revived?.value).toBe('active');
    expect(revived?.context).toMatchObject({ revision: 3, archived_at: null, created_at: sec(1) });
  });

  test('archiving a template that was never put is refused; so is a put under another name', () => {
    expect(decideTemplate(INITIAL_TEMPLATE_STATE, templateEvent('template.archived', {}))).toMatchObject({ ok: false, reason: 'cannot archive template report: it does not exist' });
    const state = givenTemplate([templateEvent('template.put', templatePut(1))]);
    expect(decideTemplate(state, templateEvent('template.put', templatePut(2, { name: 'other' }))).ok).toBe(false);
  });
});

describe('schedule', () => {
  test('a put enables it; its ticks start after the put (handled_until = put time)', () => {
    const state = givenSchedule([put1]);
    expect(state.value).toBe('enabled');
    expect(state.context).toMatchObject({ revision: 1, handled_until: sec(5), enabled_since: sec(5), last_fired: null });
    expect(decideSchedule(state, fired(sec(0))).ok).toBe(false);
    expect(decideSchedule(state, fired(sec(5))).ok).toBe(false);
    expect(decideSchedule(state, fired(sec(10))).ok).toBe(true);
  });

  test('a cron tick fires once: the same or an earlier tick is refused, saying which ticks are handled', () => {
    const state = givenSchedule([put1, fired(sec(10)), fired(sec(20))]);
    expect(state.context).toMatchObject({ handled_until: sec(20), fired_count: 2, last_fired: { tick: sec(20), trigger: 'cron' } });
    expect(decideSchedule(state, fired(sec(20)))).toEqual({ ok: false, code: 'invalid_transition', reason: `cannot fire schedule nightly at ${sec(20)}: ticks up to ${sec(20)} are handled (cron)` });
    expect(decideSchedule(state, fired(sec(10), 'cron')).ok).toBe(false);
  });

  test('a backfill fires only past ticks; a manual trigger fires at any time; neither moves handled_until', () => {
    const state = givenSchedule([put1, fired(sec(30))]);
    expect(decideSchedule(state, fired(sec(40), 'backfill')).ok).toBe(false);
    const backfilled = evolveSchedule(state, fired(sec(20), 'backfill'));
    expect(backfilled?.context).toMatchObject({ handled_until: sec(30), last_fired: { tick: sec(20), trigger: 'backfill' } });
    const manual = evolveSchedule(state, fired(sec(31), 'manual'));
    expect(manual?.context).toMatchObject({ handled_until: sec(30), last_fired: { tick: sec(31), trigger: 'manual' } });
    // The manual trigger did not take tick 40 from the cron.
    expect(decideSchedule(manual!, fired(sec(40))).ok).toBe(true);
  });

  test('misses move handled_until: one tick, or a capped range counting its ticks', () => {
    const state = givenSchedule([
      put1,
      scheduleEvent('schedule.missed', { tick: sec(10), reason: 'catchup' }),
      scheduleEvent('schedule.missed', { from: sec(20), to: sec(60), count: 5, reason: 'catchup' }),
    ]);
    expect(state.context).toMatchObject({ handled_until: sec(60), missed_count: 6 });
    expect(decideSchedule(state, scheduleEvent('schedule.missed', { tick: sec(60), reason: 'overlap' })).ok).toBe(false);
    expect(decideSchedule(state, scheduleEvent('schedule.missed', { from: sec(80), to: sec(70), count: 2, reason: 'overlap' })).ok).toBe(false);
    expect(decideSchedule(state, scheduleEvent('schedule.missed', { from: sec(70), to: sec(80), count: 0, reason: 'overlap' })).ok).toBe(false);
    expect(decideSchedule(state, fired(sec(50))).ok).toBe(false);
    expect(decideSchedule(state, fired(sec(70))).ok).toBe(true);
  });

  test('disabled: nothing fires; enable sets enabled_since; a second disable is refused as already disabled', () => {
    const disabled = givenSchedule([put1, scheduleEvent('schedule.disabled', { note: 'maintenance' }, sec(12))]);
    expect(disabled.value).toBe('disabled');
    expect(disabled.context).toMatchObject({ enabled_since: null, disabled_note: 'maintenance' });
    expect(decideSchedule(disabled, fired(sec(20)))).toMatchObject({ ok: false, reason: 'cannot fire schedule nightly: it is disabled' });
    expect(decideSchedule(disabled, scheduleEvent('schedule.disabled', { note: null }))).toMatchObject({ ok: false, reason: 'cannot disable schedule nightly: it is already disabled' });
    const enabled = evolveSchedule(disabled, scheduleEvent('schedule.enabled', {}, sec(40)));
    expect(enabled?.value).toBe('enabled');
    expect(enabled?.context).toMatchObject({ enabled_since: sec(40), disabled_note: null, handled_until: sec(5) });
  });

  test('a put with paused:true leaves it disabled; a revision keeps enabled_since when it stays enabled', () => {
    const paused = givenSchedule([scheduleEvent('schedule.put', schedulePut(1, { paused: true }), sec(1))]);
    expect(paused.value).toBe('disabled');
    expect(paused.context.enabled_since).toBeNull();
    const revised = givenSchedule([put1, scheduleEvent('schedule.put', schedulePut(2, { cron: '0 * * * * *' }), sec(50))]);
    expect(revised.context).toMatchObject({ revision: 2, enabled_since: sec(5), handled_until: sec(50), spec: { cron: '0 * * * * *' } });
  });

  test('deleted: nothing fires or is missed; a put revives the name after every tick handled before', () => {
    const deleted = givenSchedule([put1, fired(sec(100)), scheduleEvent('schedule.deleted', {}, sec(101))]);
    expect(deleted.value).toBe('deleted');
    expect(decideSchedule(deleted, fired(sec(110)))).toMatchObject({ ok: false, reason: 'cannot fire schedule nightly: it is deleted' });
    expect(decideSchedule(deleted, scheduleEvent('schedule.deleted', {}))).toMatchObject({ ok: false, reason: 'cannot delete schedule nightly: it is already deleted' });
    const revived = evolveSchedule(deleted, scheduleEvent('schedule.put', schedulePut(2), sec(50)));
    expect(revived?.value).toBe('enabled');
    // The put's time is before the last fire: handled_until stays at the later tick.
    expect(revived?.context).toMatchObject({ handled_until: sec(100), deleted_at: null, revision: 2 });
  });

  test('every command on a schedule that was never put says it does not exist', () => {
    expect(decideSchedule(INITIAL_SCHEDULE_STATE, scheduleEvent('schedule.enabled', {}))).toMatchObject({ ok: false, reason: 'cannot enable schedule nightly: it does not exist' });
    expect(decideSchedule(INITIAL_SCHEDULE_STATE, fired(sec(1), 'manual'))).toMatchObject({ ok: false, reason: 'cannot fire schedule nightly: it does not exist' });
  });
});
