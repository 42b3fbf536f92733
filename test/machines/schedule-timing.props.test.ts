/**
 * The planner against the Schedule machine, over random specs and random interleavings of
 * "the ticker runs at time t" (with restarts, i.e. downtime, and the previous job live or not):
 * - every event a plan asks for is accepted by the machine, in order;
 * - fires are strictly increasing, each due (tick + jitter <= now) when fired;
 * - fires and misses (capped ranges counted tick by tick) cover every tick up to handled_until
 *   exactly once: no tick twice, none lost;
 * - catch-up is exact: after downtime, none / latest / all fire 0 / 1 / min(n, cap) of the
 *   ticks due while down (within the window).
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { CatchupPolicies, OverlapPolicies, type ScheduleEvent, type TimingSpec } from '../../machines/schedule.events.js';
import { scheduleFold } from '../../machines/schedule.machine.js';
import { jitterOf, planTicks, ticksAfter, toTick } from '../../machines/schedule-timing.js';
import { schedulePut, scheduleEvent } from '../support/schedule-arbitraries.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 100);

/** Start times: an ordinary day, and just before each DST change in both zones. */
const BASES = ['2026-01-15T10:00:00.000Z', '2026-03-08T06:50:00.000Z', '2026-11-01T05:50:00.000Z', '2026-03-29T00:50:00.000Z', '2026-10-25T00:50:00.000Z'].map(Date.parse);

const specArb = (base: number): fc.Arbitrary<TimingSpec> =>
  fc.record({
    cron: fc.constantFrom('* * * * * *', '*/5 * * * * *', '*/7 * * * * *', '0,13,47 * * * * *', '*/15 * * * *', '0 * * * *', '30 2 * * *'),
    timezone: fc.constantFrom('UTC', 'America/New_York', 'Europe/Berlin'),
    start_at: fc.option(fc.integer({ min: -600, max: 900 }).map((s) => toTick(base + s * 1_000)), { nil: null }),
    end_at: fc.option(fc.integer({ min: 60, max: 3_600 }).map((s) => toTick(base + s * 1_000)), { nil: null }),
    jitter_ms: fc.constantFrom(0, 0, 2_500, 15_000),
    catchup: fc.constantFrom(...CatchupPolicies),
    catchup_window_ms: fc.option(fc.integer({ min: 0, max: 300_000 }), { nil: null }),
    overlap: fc.constantFrom(...OverlapPolicies),
  });


const caseArb = fc.constantFrom(...BASES).chain((base) =>
  fc.record({
    base: fc.constant(base),
    spec: specArb(base),
    runs: fc.array(fc.record({ advanceMs: fc.integer({ min: 0, max: 90_000 }), restart: fc.integer({ min: 0, max: 5 }).map((n) => n === 0), live: fc.boolean(), aheadMs: fc.constantFrom(0, 0, 500) }), { minLength: 1, maxLength: 25 }),
    limits: fc.record({ MaxMissEventsPerRun: fc.constantFrom(3, 100), MaxCatchupFires: fc.constantFrom(2, 1_000), MaxTicksPerRun: fc.constantFrom(50, 100_000) }),
  }),
);

/** The ticks in [from, to], enumerated. */
function ticksBetween(spec: TimingSpec, from: string, to: string): string[] {
  const out: string[] = [];
  for (const t of ticksAfter(spec, Date.parse(from) - 1)) {
    if (t > Date.parse(to)) break;
    out.push(toTick(t));
  }
  return out;
}

describe('planTicks with the Schedule machine', () => {
  fcTest.prop([caseArb], { numRuns })('every tick up to handled_until is fired or missed exactly once, fires in order and due (or within the lead, fired ahead)', ({ base, spec, runs, limits }) => {
    const put = scheduleEvent('schedule.put', { ...schedulePut(1), ...spec }, toTick(base));
    let state = scheduleFold.step(scheduleFold.initialState, put)!;
    expect(state).not.toBeNull();
    let now = base;
    let upSince = base;
    const covered: string[] = [];
    let lastFire = -Infinity;
    for (const run of runs) {
      now += run.advanceMs;
      if (run.restart) upSince = now;
      // A run cut short by MaxTicksPerRun is followed at once by another, as the ticker does.
      for (let again = true; again; ) {
        const ctx = state.context;
        const plan = planTicks({ spec, seed: 'nightly', handledUntil: ctx.handled_until!, enabledSince: ctx.enabled_since, now, decideUntil: now + run.aheadMs, upSince, previousJobLive: run.live && ctx.last_fired !== null, limits });
        again = plan.more;
        for (const step of plan.steps) {
          const event: ScheduleEvent =
            step.kind === 'fire' ? scheduleEvent('schedule.fired', { tick: step.tick, job_id: `job-${step.tick}` }, toTick(now)) : scheduleEvent('schedule.missed', step.data, toTick(now));
          const next = scheduleFold.step(state, event);
          expect(next, `${event.type} ${JSON.stringify(event.data)} refused after ${ctx.handled_until}`).not.toBeNull();
          state = next!;
          if (step.kind === 'fire') {
            const tick = Date.parse(step.tick);
            expect(tick).toBeGreaterThan(lastFire);
            expect(tick + jitterOf(spec.jitter_ms, 'nightly', step.tick)).toBeLessThanOrEqual(now + run.aheadMs);
            lastFire = tick;
            covered.push(step.tick);
          } else if ('tick' in step.data) {
            covered.push(step.data.tick);
          } else {
            const range = ticksBetween(spec, step.data.from, step.data.to);
            expect(range.length).toBe(step.data.count);
            expect(range[0]).toBe(step.data.from);
            expect(range.at(-1)).toBe(step.data.to);
            covered.push(...range);
          }
        }
      }
    }
    // Exactly the ticks after the put up to handled_until, each once, in order.
    const expected = ticksBetween(spec, toTick(base + 1), state.context.handled_until!);
    expect(covered).toEqual(expected.filter((t) => Date.parse(t) > base));
  });

  fcTest.prop(
    [
      fc.record({
        catchup: fc.constantFrom(...CatchupPolicies),
        downSeconds: fc.integer({ min: 0, max: 400 }),
        windowMs: fc.option(fc.integer({ min: 0, max: 400_000 }), { nil: null }),
        cap: fc.integer({ min: 1, max: 50 }),
        tz: fc.constantFrom('UTC', 'America/New_York', 'Europe/Berlin'),
        base: fc.constantFrom(...BASES),
      }),
    ],
    { numRuns },
  )('catch-up is exact: none, latest, all fire 0, 1, min(n, cap) of the n ticks due while down in the window', ({ catchup, downSeconds, windowMs, cap, tz, base }) => {
    const spec: TimingSpec = { cron: '*/3 * * * * *', timezone: tz, start_at: null, end_at: null, jitter_ms: 0, catchup, catchup_window_ms: windowMs, overlap: 'allow_all' };
    const upSince = base + downSeconds * 1_000;
    const now = upSince; // the first run after the restart
    const plan = planTicks({ spec, seed: 's', handledUntil: toTick(base), enabledSince: toTick(base), now, upSince, previousJobLive: false, limits: { MaxCatchupFires: cap } });
    const downTicks = ticksBetween(spec, toTick(base + 1), toTick(upSince - 1)).filter((t) => windowMs === null || now - Date.parse(t) <= windowMs);
    const downFires = plan.fire.filter((t) => Date.parse(t) < upSince);
    const expected = catchup === 'none' ? [] : catchup === 'latest' ? downTicks.slice(-1) : downTicks.slice(0, cap);
    expect(downFires).toEqual(expected);
  });
});
