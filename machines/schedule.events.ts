/**
 * The events of a schedule (aggregate kind `schedule`, id = its name, partition `sys`). A tick is
 * an instant the cron names, written as an ISO-8601 UTC string (`2026-03-08T07:00:00.000Z`);
 * machines/schedule-timing.ts computes them. Every tick the ticker handles becomes exactly one
 * `schedule.fired` or is covered by one `schedule.missed` (one per tick, or one capped event
 * `{from, to, count}` for many).
 */
import type { Envelope, JsonObject } from './envelope.js';
import type { BackoffPolicy } from './job.events.js';

export const CatchupPolicies = ['none', 'latest', 'all'] as const;
/** After downtime: `none` misses every tick due while down, `latest` fires the newest, `all` fires each (capped). */
export type CatchupPolicy = (typeof CatchupPolicies)[number];

export const OverlapPolicies = ['skip', 'buffer_one', 'buffer_all', 'allow_all', 'cancel_other'] as const;
/** What a tick does while the job of the previous fire is still live (waiting, queued or running). */
export type OverlapPolicy = (typeof OverlapPolicies)[number];

export const MissReasons = ['catchup', 'overlap', 'paused', 'archived_template', 'ended'] as const;
export type MissReason = (typeof MissReasons)[number];

export const FireTriggers = ['cron', 'manual', 'backfill'] as const;
/** `cron` is a tick of the spec (the default); `manual` a trigger command; `backfill` a past tick fired on request. */
export type FireTrigger = (typeof FireTriggers)[number];

/** A schedule's own job, when it names no template: the fields of a submit that make sense per fire. */
export interface ScheduleJob {
  readonly queue: string;
  readonly params?: JsonObject;
  readonly priority?: number;
  readonly max_attempts?: number;
  readonly backoff?: BackoffPolicy;
}

/**
 * When a schedule fires: the part of the spec machines/schedule-timing.ts reads. Times are ISO
 * strings; defaults are resolved before the event is written, so the log says what was in force.
 */
export interface TimingSpec {
  /** 5 fields, or 6 with seconds first; croner's syntax (L, W, #, names, ranges, steps). */
  readonly cron: string;
  /** IANA time zone the cron's wall-clock times are read in. */
  readonly timezone: string;
  /** Ticks before it are not ticks (inclusive start). */
  readonly start_at: string | null;
  /** Ticks at or after it are not ticks (exclusive end). */
  readonly end_at: string | null;
  /** Each tick fires up to this much later, by a fraction derived from (schedule, tick). */
  readonly jitter_ms: number;
  readonly catchup: CatchupPolicy;
  /** Ticks missed longer ago than this are never caught up (null: no window besides the cap). */
  readonly catchup_window_ms: number | null;
  readonly overlap: OverlapPolicy;
}

export interface ScheduleSpec extends TimingSpec {
  /** The template its jobs are made from, or null with `job` given. */
  readonly template: string | null;
  readonly job: ScheduleJob | null;
  /** Merged over the template's (or the job's) params, shallow by key. */
  readonly params: JsonObject | null;
  readonly note: string | null;
}

export interface SchedulePutData extends ScheduleSpec {
  readonly name: string;
  /** 1 for the first put, then the previous revision + 1 (the machine refuses any other number). */
  readonly revision: number;
  /** true: the schedule is disabled after this put. The command resolves an omitted `paused` (kept as it was). */
  readonly paused: boolean;
}

export interface ScheduleDisabledData {
  readonly note: string | null;
}

export interface ScheduleFiredData {
  /** The tick fired: for `manual`, the time of the trigger. */
  readonly tick: string;
  /** The job the fire makes, its id derived from (schedule, tick), or from the trigger's command for `manual`. */
  readonly job_id: string;
  /** Absent means `cron`. */
  readonly trigger?: FireTrigger;
}

/** One missed tick. */
export interface ScheduleMissedTickData {
  readonly tick: string;
  readonly reason: MissReason;
}

/** Many missed ticks at once: `count` ticks from `from` to `to` (both ticks, inclusive). */
export interface ScheduleMissedRangeData {
  readonly from: string;
  readonly to: string;
  readonly count: number;
  readonly reason: MissReason;
}

export type ScheduleMissedData = ScheduleMissedTickData | ScheduleMissedRangeData;

export type SchedulePutEvent = Envelope<'schedule.put', SchedulePutData>;
export type ScheduleEnabledEvent = Envelope<'schedule.enabled', Record<string, never>>;
export type ScheduleDisabledEvent = Envelope<'schedule.disabled', ScheduleDisabledData>;
export type ScheduleDeletedEvent = Envelope<'schedule.deleted', Record<string, never>>;
export type ScheduleFiredEvent = Envelope<'schedule.fired', ScheduleFiredData>;
export type ScheduleMissedEvent = Envelope<'schedule.missed', ScheduleMissedData>;

export type ScheduleEvent = SchedulePutEvent | ScheduleEnabledEvent | ScheduleDisabledEvent | ScheduleDeletedEvent | ScheduleFiredEvent | ScheduleMissedEvent;
export type ScheduleEventType = ScheduleEvent['type'];

export const SCHEDULE_EVENT_TYPES = [
  'schedule.put',
  'schedule.enabled',
  'schedule.disabled',
  'schedule.deleted',
  'schedule.fired',
  'schedule.missed',
] as const satisfies readonly ScheduleEventType[];

/** The last tick a missed event covers. */
export function lastMissedTick(data: ScheduleMissedData): string {
  return 'tick' in data ? data.tick : data.to;
}

/** The first tick a missed event covers. */
export function firstMissedTick(data: ScheduleMissedData): string {
  return 'tick' in data ? data.tick : data.from;
}
