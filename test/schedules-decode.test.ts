/** The shape checks of template and schedule events: what the machines write passes, bad shapes are named. */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { scheduleFold } from '../machines/schedule.machine.js';
import { templateFold } from '../machines/template.machine.js';
import { scheduleDataProblem, templateDataProblem } from '../src/schedules/decode.js';
import { schedulePut, scheduleHistoryArb, templateHistoryArb, templatePut } from './support/schedule-arbitraries.js';

const data = (e: { data: unknown }) => JSON.parse(JSON.stringify(e.data)) as Record<string, unknown>;

describe('schedule and template event shapes', () => {
  test('every event the machines accept passes (as JSON, as the log stores it)', () => {
    let checked = 0;
    for (const events of fc.sample(scheduleHistoryArb, { numRuns: 100, seed: 3 })) {
      let state = scheduleFold.initialState;
      for (const e of events) {
        const next = scheduleFold.step(state, e);
        if (next === null) continue;
        state = next;
        checked += 1;
        expect(scheduleDataProblem(e.type, data(e)), e.type).toBeNull();
      }
    }
    for (const events of fc.sample(templateHistoryArb, { numRuns: 100, seed: 3 })) {
      let state = templateFold.initialState;
      for (const e of events) {
        const next = templateFold.step(state, e);
        if (next === null) continue;
        state = next;
        checked += 1;
        expect(templateDataProblem(e.type, data(e)), e.type).toBeNull();
      }
    }
    expect(checked).toBeGreaterThan(200);
  });

  test('bad shapes are named', () => {
    const put = schedulePut(1) as unknown as Record<string, unknown>;
    expect(scheduleDataProblem('schedule.put', { ...put, cron: '61 * * * *' })).toBe('data.cron is not a usable cron');
    expect(scheduleDataProblem('schedule.put', { ...put, timezone: 'Mars/Olympus' })).toBe('data.timezone is not a known time zone');
    expect(scheduleDataProblem('schedule.put', { ...put, template: null, job: null })).toBe('data names neither a template nor a job');
    expect(scheduleDataProblem('schedule.put', { ...put, overlap: 'queue' })).toBe('data.overlap is not an overlap policy');
    expect(scheduleDataProblem('schedule.fired', { tick: 'soon', job_id: 'j' })).toBe('data.tick is not a time');
    expect(scheduleDataProblem('schedule.missed', { from: '2030-01-01T00:00:00Z', to: '2030-01-01T00:01:00Z', count: 0, reason: 'catchup' })).toBe('data.count is not a positive integer');
    expect(scheduleDataProblem('schedule.missed', { tick: '2030-01-01T00:00:00Z', reason: 'bored' })).toBe('data.reason is not a miss reason');
    expect(scheduleDataProblem('schedule.renamed', {})).toBe('unknown schedule event type schedule.renamed');
    expect(templateDataProblem('template.put', { ...(templatePut(1) as unknown as Record<string, unknown>), revision: 0 })).toBe('data.revision is not a positive integer');
  });
});
