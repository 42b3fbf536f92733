/**
 * Tick placement against an independent oracle. The oracle walks real time minute by minute
 * (instants, not wall times) with the runtime's own Intl time-zone data and applies issue 13's
 * rule literally: an instant is a tick when its wall-clock time matches the cron and has not
 * occurred before (the fall-back hour's second pass fires nothing), or when it is the first
 * instant after a spring-forward gap in which some wall-clock time matched. ticksAfter must give
 * exactly those instants, around DST changes in zones with one-hour and half-hour shifts.
 */
import { test as fcTest } from '@fast-check/vitest';
import { Cron } from 'croner';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { countTicks, ticksAfter } from '../../machines/schedule-timing.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 40);
const MINUTE = 60_000;

/** Noon (UTC) the day before a DST change, in the zones that change then. */
const CASES = [
  { zone: 'America/New_York', start: '2026-03-07T12:00:00Z' },
  { zone: 'America/New_York', start: '2026-10-31T12:00:00Z' },
  { zone: 'Europe/Berlin', start: '2026-03-28T12:00:00Z' },
  { zone: 'Europe/Berlin', start: '2026-10-24T12:00:00Z' },
  { zone: 'Australia/Lord_Howe', start: '2026-04-04T00:00:00Z' }, // 02:00 -> 01:30 (half an hour back)
  { zone: 'Australia/Lord_Howe', start: '2026-10-03T00:00:00Z' }, // 02:00 -> 02:30
  { zone: 'Asia/Kathmandu', start: '2026-03-07T12:00:00Z' }, // +05:45, no DST
];

const CRONS = ['*/15 * * * *', '30 2 * * *', '0 2 * * *', '45 1 * * *', '*/7 1-3 * * *', '0,30 * * * *', '10 2 * * *', '0 3 * * *', '59 1 * * *'];

function wallOf(format: Intl.DateTimeFormat, instant: number): number {
  const parts = format.formatToParts(instant);
  const f = (type: string) => Number(parts.find((p) => p.type === type)?.value);
  return Date.UTC(f('year'), f('month') - 1, f('day'), f('hour'), f('minute'), f('second'));
}

function oracle(cron: string, zone: string, from: number, to: number): number[] {
  const matcher = new Cron(cron, { utcOffset: 0, paused: true });
  const format = new Intl.DateTimeFormat('en-US', { timeZone: zone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
  const seen = new Set<number>();
  const ticks: number[] = [];
  let previousWall = wallOf(format, from - MINUTE);
  for (let i = from - 6 * 60 * MINUTE; i < from; i += MINUTE) seen.add(wallOf(format, i));
  for (let i = from; i <= to; i += MINUTE) {
    const wall = wallOf(format, i);
    let tick = matcher.match(new Date(wall)) && !seen.has(wall);
    // A gap: the wall clock jumped; a matching wall time inside it fires here.
    for (let w = previousWall + MINUTE; w < wall && !tick; w += MINUTE) if (matcher.match(new Date(w))) tick = true;
    if (tick && i > from) ticks.push(i);
    seen.add(wall);
    previousWall = wall;
  }
  return ticks;
}

describe('tick placement', () => {
  fcTest.prop([fc.constantFrom(...CASES), fc.constantFrom(...CRONS)], { numRuns })('ticksAfter equals the oracle over two days around a DST change', (c, cron) => {
    const from = Date.parse(c.start);
    const to = from + 2 * 24 * 60 * MINUTE;
    const ticks: number[] = [];
    for (const t of ticksAfter({ cron, timezone: c.zone }, from)) {
      if (t > to) break;
      ticks.push(t);
    }
    expect(ticks.map((t) => new Date(t).toISOString())).toEqual(oracle(cron, c.zone, from, to).map((t) => new Date(t).toISOString()));
  });
});

describe('countTicks', () => {
  const countCrons = ['* * * * * *', '*/7 * * * * *', '0,13,47 * * * * *', '*/15 * * * *', '30 2 * * *', '0 9 * * MON-FRI', '0 0 L * *', '5 4 * * SUN', '*/10 1-3 * * *'];
  fcTest.prop(
    [
      fc.record({
        cron: fc.constantFrom(...countCrons),
        zone: fc.constantFrom('UTC', 'America/New_York', 'Europe/Berlin', 'Australia/Lord_Howe', 'Asia/Kathmandu'),
        base: fc.constantFrom(...CASES.map((c) => Date.parse(c.start))),
        offsetS: fc.integer({ min: -2 * 86_400, max: 3 * 86_400 }),
        lengthS: fc.integer({ min: 0, max: 4 * 86_400 }),
        bounded: fc.boolean(),
      }),
    ],
    { numRuns: Math.max(20, Math.floor(numRuns / 2)) },
  )('counts what ticksAfter lists: how many and the last, across days and DST changes', ({ cron, zone, base, offsetS, lengthS, bounded }) => {
    const after = base + offsetS * 1_000 + 123;
    const before = after + lengthS * 1_000;
    const source = bounded ? { cron, timezone: zone, start_at: new Date(after + 3_600_000).toISOString(), end_at: new Date(before - 3_600_000).toISOString() } : { cron, timezone: zone };
    let count = 0;
    let last: number | null = null;
    for (const t of ticksAfter(source, after)) {
      if (t >= before) break;
      count += 1;
      last = t;
    }
    expect(countTicks(source, after, before)).toEqual({ count, last });
  });
});

describe('ticks in any zone, any time', () => {
  const zones = ['UTC', 'America/New_York', 'Europe/Berlin', 'Australia/Lord_Howe', 'Pacific/Chatham', 'America/Santiago', 'Africa/Casablanca', 'Asia/Tehran', 'America/St_Johns'];
  fcTest.prop(
    [fc.constantFrom(...zones), fc.constantFrom(...CRONS, '*/20 * * * * *', '0 0 * * *', '0 12 L * *'), fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2035, 0, 1) })],
    { numRuns: Math.max(30, numRuns) },
  )('are strictly increasing, after `from`, each a whole second', (zone, cron, from) => {
    let previous = from;
    let n = 0;
    for (const t of ticksAfter({ cron, timezone: zone }, from)) {
      expect(t).toBeGreaterThan(previous);
      expect(t % 1_000).toBe(0);
      previous = t;
      if (++n >= 60) break;
    }
    expect(n).toBe(60);
  });
});
