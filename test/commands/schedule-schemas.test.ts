/**
 * Validation of the template and schedule commands: every bad input is an `invalid_request`
 * naming the field (a bad cron with croner's reason, an unknown zone, end before start, a backfill
 * too large), and a put's defaults are resolved into the spec the event records.
 */
import { describe, expect, test } from 'vitest';
import { Limits, ScheduleDefaults } from '../../src/commands/limits.js';
import {
  checkBackfill,
  resolveScheduleSpec,
  scheduleBackfillSchema,
  schedulePreviewSchema,
  schedulePutSchema,
  templatePutSchema,
} from '../../src/commands/schedule-schemas.js';
import { validate } from '../../src/commands/validate.js';
import { DocketError } from '../../src/errors.js';

function refusal(fn: () => unknown): { code: string; message: string; details?: unknown } {
  try {
    fn();
  } catch (err) {
    if (err instanceof DocketError) return err.toBody();
    throw err;
  }
  throw new Error('expected a refusal');
}

const put = { name: 'nightly', template: 'report', cron: '0 2 * * *' };

describe('schedule.put', () => {
  test('a bad cron is refused with croner\'s reason, naming the field', () => {
    expect(refusal(() => validate(schedulePutSchema, { ...put, cron: '61 * * * *' }))).toMatchObject({ code: 'invalid_request', message: 'cron: invalid cron: Invalid value for minute: 61' });
    expect(refusal(() => validate(schedulePutSchema, { ...put, cron: '* * *' })).message).toBe('cron: invalid cron: must have 5 fields, or 6 with seconds first (got 3)');
  });

  test('an unknown time zone, end before start, template and job together or neither', () => {
    expect(refusal(() => validate(schedulePutSchema, { ...put, timezone: 'Mars/Olympus' })).message).toBe('timezone: unknown time zone: give an IANA name such as UTC, Europe/Berlin or America/New_York');
    expect(refusal(() => validate(schedulePutSchema, { ...put, start_at: '2030-01-02T00:00:00Z', end_at: '2030-01-01T00:00:00Z' })).message).toBe('end_at: must be after start_at');
    expect(refusal(() => validate(schedulePutSchema, { ...put, job: { queue: 'q' } })).message).toBe('template: give template or job, exactly one');
    expect(refusal(() => validate(schedulePutSchema, { name: 'x', cron: '* * * * *' })).message).toBe('template: give template or job, exactly one');
  });

  test('jitter and the catch-up window are bounded; policies are named', () => {
    expect(refusal(() => validate(schedulePutSchema, { ...put, jitter_ms: Limits.MaxScheduleJitterMs + 1 })).message).toMatch(/^jitter_ms: /);
    expect(refusal(() => validate(schedulePutSchema, { ...put, catchup_window_ms: -1 })).message).toMatch(/^catchup_window_ms: /);
    expect(refusal(() => validate(schedulePutSchema, { ...put, overlap: 'queue' })).message).toMatch(/^overlap: /);
    expect(refusal(() => validate(schedulePutSchema, { ...put, colour: 'red' })).message).toBe('unknown field colour');
  });

  test('defaults are written into the spec: UTC, catch-up latest, overlap skip, no jitter; the zone canonical', () => {
    expect(resolveScheduleSpec(validate(schedulePutSchema, put))).toEqual({
      template: 'report',
      job: null,
      cron: '0 2 * * *',
      timezone: ScheduleDefaults.timezone,
      start_at: null,
      end_at: null,
      jitter_ms: 0,
      catchup: 'latest',
      catchup_window_ms: null,
      overlap: 'skip',
      params: null,
      note: null,
    });
    const spec = resolveScheduleSpec(validate(schedulePutSchema, { ...put, timezone: 'europe/berlin', start_at: '2030-01-01T01:00:00+01:00' }));
    expect(spec).toMatchObject({ timezone: 'Europe/Berlin', start_at: '2030-01-01T00:00:00.000Z' });
  });
});

describe('template.put, backfill, preview', () => {
  test('template.put needs a queue; a lease out of range is refused', () => {
    expect(refusal(() => validate(templatePutSchema, { name: 'report' })).message).toMatch(/^queue: /);
    expect(refusal(() => validate(templatePutSchema, { name: 'report', queue: 'q', lease_ms: 10 })).message).toMatch(/^lease_ms: /);
    expect(validate(templatePutSchema, { name: 'report', queue: 'q', params: { a: 1 }, priority: 3 })).toEqual({ name: 'report', queue: 'q', params: { a: 1 }, priority: 3 });
  });

  test('backfill: to before from, a range over a year, a range in the future, more ticks than the limit', () => {
    expect(refusal(() => validate(scheduleBackfillSchema, { name: 'n', from: '2030-01-02T00:00:00Z', to: '2030-01-01T00:00:00Z' })).message).toBe('to: must not be before from');
    expect(refusal(() => validate(scheduleBackfillSchema, { name: 'n', from: '2028-01-01T00:00:00Z', to: '2030-01-01T00:00:00Z' })).message).toBe(
      `to: the range must span at most ${Limits.MaxBackfillRangeMs} ms (366 days)`,
    );
    const spec = { cron: '* * * * * *', timezone: 'UTC', start_at: null, end_at: null, jitter_ms: 0, catchup: 'none', catchup_window_ms: null, overlap: 'skip' } as const;
    const now = Date.parse('2030-01-02T00:00:00Z');
    const day = validate(scheduleBackfillSchema, { name: 'n', from: '2030-01-01T00:00:00Z', to: '2030-01-01T23:00:00Z' });
    expect(refusal(() => checkBackfill(spec, day, now))).toMatchObject({ code: 'invalid_request', message: `to: the range holds more than ${Limits.MaxBackfillTicks} ticks of this schedule; backfill it in parts` });
    expect(checkBackfill({ ...spec, cron: '0 * * * *' }, day, now)).toHaveLength(24);
    expect(refusal(() => checkBackfill(spec, day, Date.parse('2030-01-01T12:00:00Z'))).message).toBe('to: must not be in the future (the cron fires those ticks)');
  });

  test('preview: count bounded, cron checked', () => {
    expect(refusal(() => validate(schedulePreviewSchema, { cron: '* * * * *', count: Limits.MaxPreviewCount + 1 })).message).toMatch(/^count: /);
    expect(refusal(() => validate(schedulePreviewSchema, { cron: 'often' })).message).toBe('cron: invalid cron: must have 5 fields, or 6 with seconds first (got 1)');
  });
});
