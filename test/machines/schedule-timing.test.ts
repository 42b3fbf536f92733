/**
 * Tick times and the planner's policies, by example: the cron in a zone across both DST changes
 * in America/New_York and Europe/Berlin, start_at/end_at, jitter, every catch-up and overlap
 * policy, the miss cap, paused and archived templates.
 */
import { describe, expect, test } from 'vitest';
import type { TimingSpec } from '../../machines/schedule.events.js';
import { canonicalTimeZone, cronProblem, dueTicks, jitterOf, nextTicks, planTicks, type PlanInput } from '../../machines/schedule-timing.js';

const ms = Date.parse;

describe('ticks in a time zone', () => {
  test('America/New_York spring forward (2026-03-08, 02:00 -> 03:00): 02:30 does not exist and fires once at 03:00 EDT', () => {
    expect(nextTicks({ cron: '30 2 * * *', timezone: 'America/New_York' }, ms('2026-03-07T12:00:00Z'), 3)).toEqual([
      '2026-03-08T07:00:00.000Z', // 03:00 EDT, the first instant after the gap
      '2026-03-09T06:30:00.000Z', // 02:30 EDT
      '2026-03-10T06:30:00.000Z',
    ]);
  });

  test('America/New_York spring forward, every 30 minutes: 02:00 and 02:30 fall in the gap and are one tick with 03:00', () => {
    expect(nextTicks({ cron: '*/30 * * * *', timezone: 'America/New_York' }, ms('2026-03-08T05:50:00Z'), 5)).toEqual([
      '2026-03-08T06:00:00.000Z', // 01:00 EST
      '2026-03-08T06:30:00.000Z', // 01:30 EST
      '2026-03-08T07:00:00.000Z', // 02:00, 02:30 (gap) and 03:00 EDT: one tick
      '2026-03-08T07:30:00.000Z', // 03:30 EDT
      '2026-03-08T08:00:00.000Z',
    ]);
  });

  test('America/New_York fall back (2026-11-01, 02:00 -> 01:00): 01:30 occurs twice and fires once, at its first occurrence', () => {
    expect(nextTicks({ cron: '30 1 * * *', timezone: 'America/New_York' }, ms('2026-10-31T12:00:00Z'), 2)).toEqual([
      '2026-11-01T05:30:00.000Z', // 01:30 EDT; 01:30 EST (06:30Z) does not fire
      '2026-11-02T06:30:00.000Z',
    ]);
  });

  test('America/New_York fall back, every 30 minutes: the second pass of 01:00-01:59 fires nothing', () => {
    expect(nextTicks({ cron: '*/30 * * * *', timezone: 'America/New_York' }, ms('2026-11-01T04:50:00Z'), 4)).toEqual([
      '2026-11-01T05:00:00.000Z', // 01:00 EDT
      '2026-11-01T05:30:00.000Z', // 01:30 EDT
      '2026-11-01T07:00:00.000Z', // 02:00 EST (01:00 and 01:30 EST were already ticks)
      '2026-11-01T07:30:00.000Z',
    ]);
    // Asked from inside the second pass, the next tick is 02:00 EST, not 01:45 again.
    expect(nextTicks({ cron: '*/15 * * * *', timezone: 'America/New_York' }, ms('2026-11-01T06:20:00Z'), 1)).toEqual(['2026-11-01T07:00:00.000Z']);
  });

  test('Europe/Berlin spring forward (2026-03-29, 02:00 -> 03:00) and fall back (2026-10-25, 03:00 -> 02:00)', () => {
    expect(nextTicks({ cron: '30 2 * * *', timezone: 'Europe/Berlin' }, ms('2026-03-28T12:00:00Z'), 2)).toEqual([
      '2026-03-29T01:00:00.000Z', // 03:00 CEST
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
    expect(nextTicks({ cron: '30 2 * * *', timezone: 'Europe/Berlin' }, ms('2026-10-24T12:00:00Z'), 2)).toEqual([
      '2026-10-25T00:30:00.000Z', // 02:30 CEST; 02:30 CET (01:30Z) does not fire
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
    expect(nextTicks({ cron: '0,30 * * * *', timezone: 'Europe/Berlin' }, ms('2026-10-25T00:15:00Z'), 3)).toEqual([
      '2026-10-25T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T02:00:00.000Z', // 03:00 CET: 02:00 and 02:30 CET were already ticks
      '2026-10-25T02:30:00.000Z',
    ]);
  });

  test('seconds: a 6-field cron fires down to once a second; ticks are strictly after `from`', () => {
    expect(nextTicks({ cron: '* * * * * *', timezone: 'UTC' }, ms('2026-01-01T00:00:00.000Z'), 3)).toEqual(['2026-01-01T00:00:01.000Z', '2026-01-01T00:00:02.000Z', '2026-01-01T00:00:03.000Z']);
    expect(nextTicks({ cron: '*/20 * * * * *', timezone: 'UTC' }, ms('2026-01-01T00:00:00.500Z'), 2)).toEqual(['2026-01-01T00:00:20.000Z', '2026-01-01T00:00:40.000Z']);
  });

  test('start_at is inclusive and end_at exclusive', () => {
    const source = { cron: '0 * * * *', timezone: 'UTC', start_at: '2026-01-01T02:00:00.000Z', end_at: '2026-01-01T05:00:00.000Z' };
    expect(nextTicks(source, ms('2026-01-01T00:00:00Z'), 10)).toEqual(['2026-01-01T02:00:00.000Z', '2026-01-01T03:00:00.000Z', '2026-01-01T04:00:00.000Z']);
    expect(dueTicks(source, '2026-01-01T02:00:00.000Z', ms('2026-01-01T03:30:00Z'))).toEqual(['2026-01-01T03:00:00.000Z']);
  });

  test('cron and time zone problems are named; a usable cron and zone pass', () => {
    expect(cronProblem('61 * * * *')).toBe('Invalid value for minute: 61');
    expect(cronProblem('* * * *')).toBe('must have 5 fields, or 6 with seconds first (got 4)');
    expect(cronProblem('0 0 0 1 1 * 2030')).toBe('must have 5 fields, or 6 with seconds first (got 7)');
    expect(cronProblem('*/0 * * * *')).toBe('Syntax error, illegal stepping: 0');
    expect(cronProblem('@daily')).toBeNull();
    expect(cronProblem('0 0 31 2 *')).toBe('the cron names no time (e.g. a day no month has)');
    expect(cronProblem('2030-01-01T00:00:00')).not.toBeNull();
    expect(cronProblem('0 9 * * MON-FRI')).toBeNull();
    expect(canonicalTimeZone('europe/berlin')).toBe('Europe/Berlin');
    expect(canonicalTimeZone('Mars/Olympus')).toBeNull();
  });

  test('jitter is derived from (seed, tick): the same every time, within [0, jitter_ms), different across ticks', () => {
    const a = jitterOf(10_000, 'nightly', '2026-01-01T00:00:00.000Z');
    expect(jitterOf(10_000, 'nightly', '2026-01-01T00:00:00.000Z')).toBe(a);
    const values = new Set(Array.from({ length: 50 }, (_, i) => jitterOf(10_000, 'nightly', new Date(Date.UTC(2026, 0, 1, 0, i)).toISOString())));
    expect(values.size).toBeGreaterThan(40);
    for (const v of values) expect(v >= 0 && v < 10_000).toBe(true);
    expect(jitterOf(0, 'nightly', '2026-01-01T00:00:00.000Z')).toBe(0);
  });
});

const T0 = ms('2026-01-01T00:00:00.000Z');
const at = (seconds: number) => new Date(T0 + seconds * 1_000).toISOString();

/** Every 10 s in UTC, catch-up none, overlap allow_all, unless overridden. */
function spec(overrides: Partial<TimingSpec> = {}): TimingSpec {
  return { cron: '*/10 * * * * *', timezone: 'UTC', start_at: null, end_at: null, jitter_ms: 0, catchup: 'none', catchup_window_ms: null, overlap: 'allow_all', ...overrides };
}

function plan(overrides: Partial<PlanInput> & { spec?: TimingSpec }) {
  return planTicks({ spec: spec(), seed: 'nightly', handledUntil: at(0), enabledSince: at(0), now: T0, upSince: T0, previousJobLive: false, ...overrides });
}

describe('planTicks: on time', () => {
  test('fires each due tick in order and says when the next is due', () => {
    const p = plan({ now: T0 + 25_000 });
    expect(p.fire).toEqual([at(10), at(20)]);
    expect(p.missed).toEqual([]);
    expect(p.nextDueAt).toBe(T0 + 30_000);
  });

  test('jitter: a tick fires at tick + its jitter, and later ticks wait behind it', () => {
    const jittered = spec({ jitter_ms: 9_000 });
    const j10 = jitterOf(9_000, 'nightly', at(10));
    expect(plan({ spec: jittered, now: T0 + 10_000 + j10 - 1 }).fire).toEqual([]);
    expect(plan({ spec: jittered, now: T0 + 10_000 + j10 - 1 }).nextDueAt).toBe(T0 + 10_000 + j10);
    expect(plan({ spec: jittered, now: T0 + 10_000 + j10 }).fire).toEqual([at(10)]);
  });

  test('a tick before enabled_since is missed as paused; an archived template misses every due tick', () => {
    expect(plan({ enabledSince: at(25), upSince: T0, now: T0 + 30_000 }).steps).toEqual([
      { kind: 'missed', data: { tick: at(10), reason: 'paused' } },
      { kind: 'missed', data: { tick: at(20), reason: 'paused' } },
      { kind: 'fire', tick: at(30) },
    ]);
    expect(plan({ templateArchived: true, now: T0 + 20_000 }).missed).toEqual([
      { tick: at(10), reason: 'archived_template' },
      { tick: at(20), reason: 'archived_template' },
    ]);
    expect(plan({ enabledSince: null, now: T0 + 60_000 }).steps).toEqual([]);
  });
});

describe('planTicks: catch-up after downtime (ticks due before upSince)', () => {
  // Down from 0 to 55 s: ticks 10..50 were due while no ticker ran; 60 is on time.
  const down = { now: T0 + 60_000, upSince: T0 + 55_000 };

  test('none: every tick due while down is missed (catchup); the ticks after start fire', () => {
    const p = plan({ ...down, spec: spec({ catchup: 'none' }) });
    expect(p.missed).toEqual([10, 20, 30, 40, 50].map((s) => ({ tick: at(s), reason: 'catchup' })));
    expect(p.fire).toEqual([at(60)]);
  });

  test('latest: one fire for the newest tick due while down', () => {
    const p = plan({ ...down, spec: spec({ catchup: 'latest' }) });
    expect(p.missed).toEqual([10, 20, 30, 40].map((s) => ({ tick: at(s), reason: 'catchup' })));
    expect(p.fire).toEqual([at(50), at(60)]);
  });

  test('all: every tick in order, capped (the oldest fire, newer ones are missed)', () => {
    expect(plan({ ...down, spec: spec({ catchup: 'all' }) }).fire).toEqual([10, 20, 30, 40, 50, 60].map(at));
    const capped = plan({ ...down, spec: spec({ catchup: 'all' }), limits: { MaxCatchupFires: 2 } });
    expect(capped.steps).toEqual([
      { kind: 'fire', tick: at(10) },
      { kind: 'fire', tick: at(20) },
      ...[30, 40, 50].map((s) => ({ kind: 'missed', data: { tick: at(s), reason: 'catchup' } })),
      { kind: 'fire', tick: at(60) },
    ]);
  });

  test('catchup_window_ms: ticks missed longer ago are never caught up', () => {
    const p = plan({ ...down, spec: spec({ catchup: 'all', catchup_window_ms: 25_000 }) });
    expect(p.missed).toEqual([10, 20, 30].map((s) => ({ tick: at(s), reason: 'catchup' })));
    expect(p.fire).toEqual([at(40), at(50), at(60)]);
  });

  test('misses beyond 100 per run are one capped event {from, to, count, reason}', () => {
    const p = plan({ spec: spec({ cron: '* * * * * *' }), now: T0 + 3_600_000, upSince: T0 + 3_600_000 });
    expect(p.missed).toHaveLength(101);
    expect(p.missed[99]).toEqual({ tick: at(100), reason: 'catchup' });
    expect(p.missed[100]).toEqual({ from: at(101), to: at(3_599), count: 3_499, reason: 'catchup' });
    expect(p.fire).toEqual([at(3_600)]);
  });

  test('a long stretch of one reason is counted, not listed: a day of a schedule every second in one run', () => {
    const p = plan({ spec: spec({ cron: '* * * * * *', timezone: 'Europe/Berlin' }), now: T0 + 86_400_000, upSince: T0 + 86_400_000 });
    expect(p.missed.at(-1)).toEqual({ from: at(101), to: at(86_399), count: 86_299, reason: 'catchup' });
    expect(p.more).toBe(false);
  });

  test('a run looks at MaxTicksPerRun ticks at most (where they must be listed) and says there is more', () => {
    // Skipped behind a live job: the reason depends on the run, so each tick is looked at.
    const p = plan({ spec: spec({ cron: '* * * * * *', overlap: 'skip' }), previousJobLive: true, now: T0 + 3_600_000, limits: { MaxTicksPerRun: 1_000 } });
    expect(p.more).toBe(true);
    expect(p.missed.at(-1)).toEqual({ from: at(101), to: at(1_000), count: 900, reason: 'overlap' });
    expect(p.nextDueAt).toBe(T0 + 3_600_000);
  });
});

describe('planTicks: overlap, while the previous fire\'s job is live', () => {
  const live = { now: T0 + 30_000, previousJobLive: true };

  test('allow_all fires anyway', () => {
    expect(plan({ ...live, spec: spec({ overlap: 'allow_all' }) }).fire).toEqual([at(10), at(20), at(30)]);
  });

  test('skip misses each tick (overlap); with the job ended, the first fires and the rest are skipped behind it', () => {
    expect(plan({ ...live, spec: spec({ overlap: 'skip' }) }).missed).toEqual([10, 20, 30].map((s) => ({ tick: at(s), reason: 'overlap' })));
    const ended = plan({ now: T0 + 30_000, spec: spec({ overlap: 'skip' }) });
    expect(ended.fire).toEqual([at(10)]);
    expect(ended.missed).toEqual([20, 30].map((s) => ({ tick: at(s), reason: 'overlap' })));
  });

  test('cancel_other cancels the live job and fires; within one run only the newest fires', () => {
    const p = plan({ ...live, spec: spec({ overlap: 'cancel_other' }) });
    expect(p.cancelPrevious).toBe(true);
    expect(p.steps).toEqual([
      { kind: 'missed', data: { tick: at(10), reason: 'overlap' } },
      { kind: 'missed', data: { tick: at(20), reason: 'overlap' } },
      { kind: 'fire', tick: at(30) },
    ]);
  });

  test('buffer_all: the ticks wait while the job is live; when it ends they fire one per ended job, in order', () => {
    const waiting = plan({ ...live, spec: spec({ overlap: 'buffer_all' }) });
    expect(waiting.steps).toEqual([]);
    expect(waiting.waiting).toBe(at(10));
    expect(waiting.nextDueAt).toBeNull();
    const ended = plan({ now: T0 + 30_000, spec: spec({ overlap: 'buffer_all' }) });
    expect(ended.fire).toEqual([at(10)]);
    expect(ended.waiting).toBe(at(20));
  });

  test('buffer_one: when the job ends the waiting tick fires, the newest waits, those between are missed', () => {
    expect(plan({ ...live, spec: spec({ overlap: 'buffer_one' }) }).waiting).toBe(at(10));
    const ended = plan({ now: T0 + 40_000, spec: spec({ overlap: 'buffer_one' }) });
    expect(ended.steps).toEqual([
      { kind: 'fire', tick: at(10) },
      { kind: 'missed', data: { tick: at(20), reason: 'overlap' } },
      { kind: 'missed', data: { tick: at(30), reason: 'overlap' } },
    ]);
    expect(ended.waiting).toBe(at(40));
  });

  test('after end_at nothing waits: ticks that would wait are missed (ended)', () => {
    const p = plan({ ...live, spec: spec({ overlap: 'buffer_all', end_at: at(25) }) });
    expect(p.missed).toEqual([10, 20].map((s) => ({ tick: at(s), reason: 'ended' })));
    expect(p.waiting).toBeNull();
  });
});
