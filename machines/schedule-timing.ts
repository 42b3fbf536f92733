/**
 * When a schedule fires, pure: which instants a cron names in a time zone, which of them are due,
 * and what the catch-up, overlap and jitter rules make of them (`planTicks`). No clock: `now` and
 * every other time come in as arguments; jitter is derived from a seed, never random.
 *
 * Ticks. croner parses and matches the cron on wall-clock time (5 fields, or 6 with seconds
 * first). docket places each matching wall-clock time in the zone by one rule (issue 13):
 * - a wall-clock time that occurs once is a tick at that instant;
 * - one that occurs twice (the fall-back hour) is a tick once, at its first occurrence;
 * - one that does not exist (the spring-forward gap) is a tick once, at the first valid instant
 *   after the gap (the transition itself); several such times, and a time matched exactly at the
 *   end of the gap, are one tick there.
 * So ticks are strictly increasing instants, and a tick is written as an ISO-8601 UTC string.
 * This holds for every pattern alike (croner on its own fires "interval" patterns such as
 * `*\/15 * * * *` on both passes of a repeated hour and skips them in a gap).
 */
import { Cron, CronPattern } from 'croner';
import type { MissReason, ScheduleMissedData, TimingSpec } from './schedule.events.js';
import { fnv1a } from './retry-policy.js';

/** The cron forms accepted: 5 fields, or 6 with seconds first (no year field). */
const CRON_OPTIONS = { mode: '5-or-6-parts' } as const;

const SECOND_MS = 1_000;
const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/** Defaults and bounds of the planner, each with its reason (README "Schedules and templates"). */
export const ScheduleTiming = {
  /**
   * Missed ticks recorded one event each per planner run (a catch-up); beyond, consecutive misses
   * of one reason are one capped event `{from, to, count, reason}` (issue 13: 10,000 schedules
   * down an hour must not write 36 million events).
   */
  MaxMissEventsPerRun: 100,
  /** `catchup: all` fires at most this many ticks missed while down: the oldest, in order; the newer ones are missed (`catchup`). */
  MaxCatchupFires: 1_000,
  /**
   * Ticks one planner run looks at one by one, at most (stretches missed for a fixed reason are
   * counted, not listed): where a policy must judge each tick (overlap), a long backlog is handled
   * in several runs of bounded work instead of one long pause of the ticker.
   */
  MaxTicksPerRun: 100_000,
} as const;

/** Why a cron is refused, in croner's words, or null when it is a usable cron. */
export function cronProblem(cron: string): string | null {
  const fields = cron.trim().split(/\s+/).length;
  // croner's own message for a wrong count offers a 7-field form (with a year) docket refuses.
  if (!cron.trim().startsWith('@') && fields !== 5 && fields !== 6) return `must have 5 fields, or 6 with seconds first (got ${fields})`;
  try {
    new CronPattern(cron, undefined, CRON_OPTIONS);
  } catch (err) {
    return err instanceof Error ? err.message.replace(/^CronPattern: /, '') : String(err);
  }
  // A pattern such as `0 0 31 2 *` parses but names no time: refused rather than never firing.
  // croner searches years ahead, so a rare date (Feb 29 on a Monday) is still found.
  if (wallCron(cron).nextRun(new Date(Date.UTC(2000, 0, 1))) === null) return 'the cron names no time (e.g. a day no month has)';
  return null;
}

const zoneCache = new Map<string, Zone>();

/** Time zones asked for, by the name given: an Intl.DateTimeFormat per ask costs ~100 µs (every put and every put's fold asks). */
const canonicalZones = new Map<string, string | null>();

/** The canonical IANA name of a time zone (`utc` -> `UTC`), or null when the runtime does not know it. */
export function canonicalTimeZone(timeZone: string): string | null {
  const known = canonicalZones.get(timeZone);
  if (known !== undefined) return known;
  let canonical: string | null;
  try {
    canonical = new Intl.DateTimeFormat('en-US', { timeZone }).resolvedOptions().timeZone;
  } catch {
    canonical = null;
  }
  if (canonicalZones.size >= 1_000) canonicalZones.clear();
  canonicalZones.set(timeZone, canonical);
  return canonical;
}

/** Wall-clock times as UTC instants: croner matches the pattern there, with no zone of its own. */
const wallCrons = new Map<string, Cron>();
function wallCron(cron: string): Cron {
  let c = wallCrons.get(cron);
  if (c === undefined) {
    // utcOffset 0: croner reads wall time off the Date's UTC fields (about 10x faster than its `timezone`).
    c = new Cron(cron, { ...CRON_OPTIONS, utcOffset: 0, paused: true });
    if (wallCrons.size >= 10_000) wallCrons.clear();
    wallCrons.set(cron, c);
  }
  return c;
}

/**
 * The cron's next wall-clock time after `wall` (ms), or null. Remembered per cron (a bounded map):
 * schedules sharing a cron ask for the same instants (10,000 schedules every second all ask for
 * the next second), and croner's search costs tens of microseconds where a lookup costs one.
 */
const nextWalls = new Map<string, Map<number, number | null>>();
const NEXT_WALLS_PER_CRON = 4_096;
function nextWall(cron: string, wall: number): number | null {
  let memo = nextWalls.get(cron);
  if (memo === undefined) {
    if (nextWalls.size >= 10_000) nextWalls.clear();
    nextWalls.set(cron, (memo = new Map()));
  }
  const known = memo.get(wall);
  if (known !== undefined) return known;
  const next = wallCron(cron).nextRun(new Date(wall))?.getTime() ?? null;
  if (memo.size >= NEXT_WALLS_PER_CRON) memo.clear();
  memo.set(wall, next);
  return next;
}

/** A time zone's offsets: wall-clock time = instant + offset. */
class Zone {
  private readonly format: Intl.DateTimeFormat;
  private readonly offsets = new Map<number, number>();
  readonly fixed: boolean;

  constructor(readonly name: string) {
    this.format = new Intl.DateTimeFormat('en-US', {
      timeZone: name,
      hourCycle: 'h23',
      era: 'short',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    this.fixed = name === 'UTC' || name === 'Etc/UTC' || name === 'Etc/GMT';
  }

  static of(name: string): Zone {
    let zone = zoneCache.get(name);
    if (zone === undefined) {
      zone = new Zone(name);
      zoneCache.set(name, zone);
    }
    return zone;
  }

  /** Offset (ms) at `instant`. Cached per minute: zone transitions since 1972 fall on whole minutes. */
  offsetAt(instant: number): number {
    if (this.fixed) return 0;
    const minute = Math.floor(instant / MINUTE_MS);
    const cacheable = instant >= EXACT_BEFORE;
    if (cacheable) {
      const cached = this.offsets.get(minute);
      if (cached !== undefined) return cached;
    }
    const second = Math.floor(instant / SECOND_MS) * SECOND_MS;
    const parts = this.format.formatToParts(second);
    const field = (type: string): number => Number(parts.find((p) => p.type === type)?.value);
    const era = parts.find((p) => p.type === 'era')?.value;
    const year = era === 'BC' || era === 'B' ? 1 - field('year') : field('year');
    const wall = Date.UTC(year, field('month') - 1, field('day'), field('hour'), field('minute'), field('second'));
    // Date.UTC maps years 0-99 to 1900-1999; set the year again for those.
    const exact = year >= 0 && year < 100 ? new Date(wall).setUTCFullYear(year) : wall;
    const offset = exact - second;
    if (cacheable) {
      if (this.offsets.size >= 100_000) this.offsets.clear();
      this.offsets.set(minute, offset);
    }
    return offset;
  }

  wallOf(instant: number): number {
    return instant + this.offsetAt(instant);
  }

  /**
   * The instant of a wall-clock time: its first occurrence, or the first instant after the gap
   * it falls in. Non-decreasing in `wall`, so placed ticks stay in order.
   */
  place(wall: number): number {
    if (this.fixed) return wall;
    const before = this.offsetAt(wall - DAY_MS);
    const after = this.offsetAt(wall + DAY_MS);
    const a = wall - Math.max(before, after);
    const b = wall - Math.min(before, after);
    // Of the (at most two) instants that could show this wall time, the earlier that does.
    if (this.wallOf(a) === wall) return a;
    if (this.wallOf(b) === wall) return b;
    // A gap: the transition lies in (a, b]; find its first second with the new offset.
    let lo = Math.floor(a / SECOND_MS);
    let hi = Math.ceil(b / SECOND_MS);
    while (lo + 1 < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (this.offsetAt(mid * SECOND_MS) === before) lo = mid;
      else hi = mid;
    }
    return hi * SECOND_MS;
  }
}

/** Offsets before this instant (1972) are computed exactly each time: older transitions fall on odd seconds. */
const EXACT_BEFORE = Date.UTC(1972, 0, 1);

/** The cron and zone a timing spec names, as the ticks' source. */
export interface TickSource {
  readonly cron: string;
  readonly timezone: string;
  readonly start_at?: string | null;
  readonly end_at?: string | null;
}

function bounds(source: TickSource): { start: number; end: number } {
  const start = source.start_at ? Date.parse(source.start_at) : -Infinity;
  const end = source.end_at ? Date.parse(source.end_at) : Infinity;
  return { start, end };
}

/**
 * The ticks strictly after `after` (ms), in order, within [start_at, end_at): an endless (or
 * end_at-bounded) lazy sequence of instants (ms).
 */
export function* ticksAfter(source: TickSource, after: number): Generator<number, void, undefined> {
  if (Number.isNaN(after)) throw new RangeError('ticksAfter: `after` is not a time');
  const zone = Zone.of(source.timezone);
  const { start, end } = bounds(source);
  const from = Math.max(after, start - 1);
  // Every wall time before wallOf(from) is placed at or before `from` (placement is monotone),
  // so the walk starts there; walls of a repeated hour's second pass place earlier and are passed.
  let wall = zone.wallOf(from);
  let last = from;
  for (;;) {
    const next = nextWall(source.cron, wall);
    if (next === null) return;
    wall = next;
    const tick = zone.place(wall);
    if (tick <= last) continue;
    if (tick >= end) return;
    last = tick;
    yield tick;
  }
}

/**
 * How many times of day a cron matches before a second of the day, from croner's parsed fields:
 * on a day that matches, every (hour, minute, second) of the pattern matches, so the count is
 * arithmetic. Lets a long stretch of ticks be counted without listing them (countTicks).
 */
class TimesOfDay {
  private readonly hours: readonly number[];
  private readonly minutes: readonly number[];
  private readonly hourPrefix: number[];
  private readonly minutePrefix: number[];
  private readonly secondPrefix: number[];
  private readonly perHour: number;
  private readonly perMinute: number;

  constructor(cron: string) {
    const pattern = new CronPattern(cron, undefined, CRON_OPTIONS);
    const prefix = (flags: readonly number[]) => flags.reduce<number[]>((acc, flag) => [...acc, acc.at(-1)! + (flag ? 1 : 0)], [0]);
    this.hours = pattern.hour;
    this.minutes = pattern.minute;
    this.hourPrefix = prefix(pattern.hour);
    this.minutePrefix = prefix(pattern.minute);
    this.secondPrefix = prefix(pattern.second);
    this.perMinute = this.secondPrefix[60]!;
    this.perHour = this.minutePrefix[60]! * this.perMinute;
  }

  /** Matching times of day at seconds 0 .. n-1 (n from 0 to 86,400). */
  before(n: number): number {
    if (n <= 0) return 0;
    const hour = Math.floor(n / 3_600);
    let count = this.hourPrefix[Math.min(hour, 24)]! * this.perHour;
    if (hour < 24 && this.hours[hour]) {
      const rest = n - hour * 3_600;
      const minute = Math.floor(rest / 60);
      count += this.minutePrefix[minute]! * this.perMinute;
      if (this.minutes[minute]) count += this.secondPrefix[rest - minute * 60]!;
    }
    return count;
  }
}

const timesOfDay = new Map<string, TimesOfDay>();
function timesOfDayOf(cron: string): TimesOfDay {
  let t = timesOfDay.get(cron);
  if (t === undefined) {
    t = new TimesOfDay(cron);
    if (timesOfDay.size >= 10_000) timesOfDay.clear();
    timesOfDay.set(cron, t);
  }
  return t;
}

/** Wall-clock times the cron matches in (from, to] (wall ms), day by day. */
function countWallMatches(cron: string, from: number, to: number): number {
  const matcher = wallCron(cron);
  const times = timesOfDayOf(cron);
  let count = 0;
  for (let day = Math.floor((from + 1) / DAY_MS) * DAY_MS; day <= to; day += DAY_MS) {
    // A day matches when its first match falls within it (each matching day has one).
    const first = matcher.nextRun(new Date(day - 1));
    if (first === null) break;
    if (first.getTime() >= day + DAY_MS) {
      // Skip ahead to the next matching day.
      day = Math.floor(first.getTime() / DAY_MS) * DAY_MS - DAY_MS;
      continue;
    }
    const lo = Math.max(from + 1, day);
    const hi = Math.min(to, day + DAY_MS - 1);
    if (hi < lo) continue;
    count += times.before(Math.ceil((hi - day + 1) / SECOND_MS)) - times.before(Math.ceil((lo - day) / SECOND_MS));
  }
  return count;
}

export interface TickCount {
  readonly count: number;
  /** The last tick counted (ms), or null when none. */
  readonly last: number | null;
}

/**
 * The ticks in (after, before), exclusive both, within start_at/end_at: how many, and the last,
 * counted rather than listed where the zone's offset is steady (a day either side), listed where a
 * zone change is near. Equal to counting `ticksAfter` (a property test holds it to that).
 */
export function countTicks(source: TickSource, after: number, before: number): TickCount {
  const zone = Zone.of(source.timezone);
  const { start, end } = bounds(source);
  const lo = Math.max(after, start - 1);
  const hi = Math.min(before, end) - 1;
  let count = 0;
  let last: number | null = null;
  for (let from = lo; from < hi; ) {
    const to = Math.min(from + DAY_MS, hi);
    const offset = zone.offsetAt(from);
    if (zone.fixed || (zone.offsetAt(from - DAY_MS) === offset && zone.offsetAt(to) === offset)) {
      // No change within a day before or in the chunk: each wall time in it occurs once, at wall - offset.
      const n = countWallMatches(source.cron, from + offset, to + offset);
      if (n > 0) {
        count += n;
        last = wallCron(source.cron).previousRuns(1, new Date(to + offset + 1))[0]!.getTime() - offset;
      }
    } else {
      for (const tick of ticksAfter(source, from)) {
        if (tick > to) break;
        count += 1;
        last = tick;
      }
    }
    from = to;
  }
  return { count, last };
}

/** A tick as written in events: ISO-8601 UTC with milliseconds. */
export function toTick(instant: number): string {
  return new Date(instant).toISOString();
}

/** The next `count` ticks strictly after `from` (ms), within start_at/end_at, as ISO strings. */
export function nextTicks(source: TickSource, from: number, count: number): string[] {
  const ticks: string[] = [];
  if (count <= 0) return ticks;
  for (const tick of ticksAfter(source, from)) {
    ticks.push(toTick(tick));
    if (ticks.length >= count) break;
  }
  return ticks;
}

/** The ticks after `lastHandled` (an ISO tick, or null for none) up to and including `now` (ms), within start_at/end_at. */
export function dueTicks(source: TickSource, lastHandled: string | null, now: number, limit: number = ScheduleTiming.MaxTicksPerRun): string[] {
  const ticks: string[] = [];
  const after = lastHandled === null ? -Infinity : Date.parse(lastHandled);
  for (const tick of ticksAfter(source, Number.isFinite(after) ? after : now - DAY_MS)) {
    if (tick > now || ticks.length >= limit) break;
    ticks.push(toTick(tick));
  }
  return ticks;
}

/** How much later than its tick a fire happens: a fraction of `jitterMs` derived from (seed, tick). */
export function jitterOf(jitterMs: number, seed: string, tick: string): number {
  if (jitterMs <= 0) return 0;
  return Math.floor((fnv1a(`${seed}\u0000${tick}`) / 0x1_0000_0000) * jitterMs);
}

/** The planner's bounds (ScheduleTiming gives the defaults). */
export interface PlanLimits {
  readonly MaxMissEventsPerRun: number;
  readonly MaxCatchupFires: number;
  readonly MaxTicksPerRun: number;
}

export interface PlanInput {
  readonly spec: TimingSpec;
  /** Stable per schedule (its name): jitter is derived from (seed, tick). */
  readonly seed: string;
  /** The schedule's `handled_until`: ticks at or before it are handled. */
  readonly handledUntil: string;
  /** The schedule's `enabled_since`: null plans nothing; ticks before it were due while disabled. */
  readonly enabledSince: string | null;
  readonly now: number;
  /**
   * Fire ahead (the ticker's lead): ticks due after `now` up to this instant are decided now as
   * if due (their jobs become claimable at their due time, README "Schedules"). Every other rule
   * (catch-up, window, end, overlap) reads `now`. Absent or at most `now`: nothing ahead.
   */
  readonly decideUntil?: number;
  /**
   * Since when ticks have been planned without a break (the ticker's start as `sys` leader):
   * ticks before it were due while no ticker ran, and the catch-up policy decides them.
   */
  readonly upSince: number;
  /** Whether the job of the schedule's last fire is still live (waiting, queued or running). */
  readonly previousJobLive: boolean;
  /** The schedule's template is archived: its ticks are missed. */
  readonly templateArchived?: boolean;
  readonly limits?: Partial<PlanLimits>;
}

export type PlanStep = { readonly kind: 'fire'; readonly tick: string } | { readonly kind: 'missed'; readonly data: ScheduleMissedData };

export interface Plan {
  /** What to append, in tick order: each `fire` a `schedule.fired` (trigger cron) and its job, each `missed` a `schedule.missed`. */
  readonly steps: readonly PlanStep[];
  readonly fire: readonly string[];
  readonly missed: readonly ScheduleMissedData[];
  /** `cancel_other`: cancel the previous fire's live job before the first fire. */
  readonly cancelPrevious: boolean;
  /** The tick held back by a buffer_* overlap policy until the live job ends (and the ticks after it), or null. */
  readonly waiting: string | null;
  /** The limit on ticks per run cut this run short: plan again at once. */
  readonly more: boolean;
  /**
   * When to plan again (ms): the next tick's due time (tick + jitter); null when no tick will
   * come, or when a tick waits for the live job (plan again when it ends).
   */
  readonly nextDueAt: number | null;
}

/** A plan with nothing to do (a schedule that is not enabled). */
export const EMPTY_PLAN: Plan = { steps: [], fire: [], missed: [], cancelPrevious: false, waiting: null, more: false, nextDueAt: null };

/** Steps with misses beyond the per-run allowance folded into capped events (consecutive, one reason). */
class StepList {
  readonly steps: PlanStep[] = [];
  private misses = 0;
  constructor(private readonly maxMissEvents: number) {}

  /** The single-miss events of this run are used up: further misses go into capped events. */
  get capped(): boolean {
    return this.misses >= this.maxMissEvents;
  }

  /** `count` consecutive ticks from `from` to `to`, all missed for `reason` (only once capped). */
  missRange(from: string, to: string, count: number, reason: MissReason): void {
    this.misses += count;
    const last = this.steps.at(-1);
    if (last?.kind === 'missed' && 'count' in last.data && last.data.reason === reason) {
      this.steps[this.steps.length - 1] = { kind: 'missed', data: { ...last.data, to, count: last.data.count + count } };
    } else {
      this.steps.push({ kind: 'missed', data: { from, to, count, reason } });
    }
  }

  fire(tick: string): void {
    this.steps.push({ kind: 'fire', tick });
  }

  miss(tick: string, reason: MissReason): void {
    this.misses += 1;
    if (this.misses <= this.maxMissEvents) {
      this.steps.push({ kind: 'missed', data: { tick, reason } });
      return;
    }
    const last = this.steps.at(-1);
    if (last?.kind === 'missed' && 'count' in last.data && last.data.reason === reason) {
      this.steps[this.steps.length - 1] = { kind: 'missed', data: { ...last.data, to: tick, count: last.data.count + 1 } };
    } else {
      this.steps.push({ kind: 'missed', data: { from: tick, to: tick, count: 1, reason } });
    }
  }

  /** cancel_other: the fire of this run at index `index` is replaced by a miss (its job would be cancelled at once). */
  unfire(index: number): void {
    const step = this.steps[index];
    if (step?.kind !== 'fire') return;
    this.misses += 1;
    this.steps[index] = { kind: 'missed', data: { tick: step.tick, reason: 'overlap' } };
  }
}

/**
 * One run of a schedule's ticker: the ticks due since `handledUntil`, each fired or missed, in
 * order, by these rules (README "Schedules and templates"):
 * 1. A tick is due at tick + jitter; the run stops at the first tick not yet due (order is kept).
 * 2. Before `enabledSince`: missed `paused`. Template archived: missed `archived_template`.
 * 3. Due before `upSince` (no ticker ran): older than `catchup_window_ms`, missed `catchup`;
 *    else `none` misses it, `latest` fires only the newest such tick, `all` fires each (the first
 *    MaxCatchupFires; the rest missed `catchup`).
 * 4. A tick to fire meets the overlap policy while the previous fire's job is live (a job fired
 *    earlier in the run counts as live): `allow_all` fires; `skip` misses (`overlap`);
 *    `cancel_other` fires and cancels the live job (a fire of this run is turned into a miss
 *    instead); `buffer_all` waits (it and every later tick stay unhandled until the job ends);
 *    `buffer_one` waits too, but once a fire happens in a run the ticks after it, save the
 *    newest, are missed (`overlap`) and the newest waits: one tick waits at a time.
 * 5. After end_at, a tick that would wait is missed `ended`: nothing waits for a schedule that
 *    has ended.
 */
export function planTicks(input: PlanInput): Plan {
  const { spec, seed, now, upSince, previousJobLive } = input;
  if (input.enabledSince === null) return EMPTY_PLAN;
  const horizon = Math.max(now, input.decideUntil ?? now);
  const limits: PlanLimits = { ...ScheduleTiming, ...input.limits };
  const enabledSince = Date.parse(input.enabledSince);
  const endAt = spec.end_at ? Date.parse(spec.end_at) : Infinity;
  const ended = now >= endAt;
  const window = spec.catchup_window_ms;
  const list = new StepList(limits.MaxMissEventsPerRun);

  let live = previousJobLive;
  let cancelPrevious = false;
  let lastFireIndex = -1;
  let catchupFires = 0;
  let waiting: string | null = null;
  let more = false;
  let nextDueAt: number | null = null;
  let seen = 0;

  let ticks = ticksAfter(spec, Date.parse(input.handledUntil));
  let current = ticks.next();
  while (!current.done) {
    const tick = current.value;
    if (list.capped && seen < limits.MaxTicksPerRun) {
      // A long stretch missed for one reason (hours of downtime of a schedule every second) is
      // counted into one capped event, not listed tick by tick.
      const stretch = missStretch(tick);
      if (stretch !== null) {
        const { count, last } = countTicks(spec, tick - 1, stretch.before);
        if (count > 1 && last !== null) {
          seen += 1;
          list.missRange(toTick(tick), toTick(last), count, stretch.reason);
          ticks = ticksAfter(spec, last);
          current = ticks.next();
          continue;
        }
      }
    }
    const iso = toTick(tick);
    const dueAt = tick + jitterOf(spec.jitter_ms, seed, iso);
    if (dueAt > horizon) {
      nextDueAt = dueAt;
      break;
    }
    if (seen >= limits.MaxTicksPerRun) {
      more = true;
      nextDueAt = now;
      break;
    }
    seen += 1;
    const following = ticks.next();
    const step = decideTick(tick, iso, following.done ? null : following.value);
    if (step === 'stop') break;
    current = following;
  }

  /**
   * When `tick` is missed for a reason no later decision of this run can change, that reason and
   * the instant before which every tick shares it (the rules of decideTick, in its order); else null.
   */
  function missStretch(tick: number): { reason: MissReason; before: number } | null {
    // Ticks before this are due whatever their jitter (jitter < jitter_ms).
    const surelyDue = now - Math.max(0, spec.jitter_ms - 1);
    if (tick < enabledSince) return { reason: 'paused', before: Math.min(enabledSince, surelyDue) };
    if (input.templateArchived) return { reason: 'archived_template', before: surelyDue };
    if (tick >= upSince) return null;
    if (window !== null && now - tick > window) return { reason: 'catchup', before: Math.min(now - window, upSince, surelyDue) };
    if (spec.catchup === 'none' || (spec.catchup === 'all' && catchupFires >= limits.MaxCatchupFires)) return { reason: 'catchup', before: Math.min(upSince, surelyDue) };
    if (spec.catchup === 'latest') {
      // Every tick due while down but the newest; a window's boundary leaves the reason the same.
      const newest = countTicks(spec, tick - 1, upSince).last;
      return newest === null ? null : { reason: 'catchup', before: Math.min(newest, surelyDue) };
    }
    return null;
  }

  /** One tick's fate; 'stop' leaves it (and every later tick) waiting. */
  function decideTick(tick: number, iso: string, next: number | null): 'handled' | 'stop' {
    if (tick < enabledSince) return list.miss(iso, 'paused'), 'handled';
    if (input.templateArchived) return list.miss(iso, 'archived_template'), 'handled';
    if (tick < upSince) {
      if (window !== null && now - tick > window) return list.miss(iso, 'catchup'), 'handled';
      if (spec.catchup === 'none') return list.miss(iso, 'catchup'), 'handled';
      // The newest tick due while down is the one whose successor came after the ticker started.
      if (spec.catchup === 'latest' && next !== null && next < upSince) return list.miss(iso, 'catchup'), 'handled';
      if (spec.catchup === 'all' && catchupFires >= limits.MaxCatchupFires) return list.miss(iso, 'catchup'), 'handled';
    }
    const isCatchup = tick < upSince;
    const fire = (): 'handled' => {
      if (isCatchup) catchupFires += 1;
      lastFireIndex = list.steps.length;
      list.fire(iso);
      live = true;
      return 'handled';
    };
    if (!live || spec.overlap === 'allow_all') return fire();
    switch (spec.overlap) {
      case 'skip':
        list.miss(iso, 'overlap');
        return 'handled';
      case 'cancel_other':
        if (lastFireIndex >= 0) list.unfire(lastFireIndex);
        else cancelPrevious = true;
        return fire();
      case 'buffer_all':
        return wait(iso);
      case 'buffer_one': {
        // Held back by a job fired before this run: wait. Behind a fire of this run: only the
        // newest due tick waits; those between are missed.
        if (lastFireIndex < 0) return wait(iso);
        const newestDue = next === null || next > now;
        if (!newestDue) {
          list.miss(iso, 'overlap');
          return 'handled';
        }
        return wait(iso);
      }
      default: {
        const unhandled: never = spec.overlap;
        return unhandled;
      }
    }
  }

  function wait(iso: string): 'handled' | 'stop' {
    if (ended) {
      list.miss(iso, 'ended');
      return 'handled';
    }
    waiting = iso;
    nextDueAt = null;
    return 'stop';
  }

  const steps = list.steps;
  return {
    steps,
    fire: steps.flatMap((s) => (s.kind === 'fire' ? [s.tick] : [])),
    missed: steps.flatMap((s) => (s.kind === 'missed' ? [s.data] : [])),
    cancelPrevious,
    waiting,
    more,
    nextDueAt,
  };
}
