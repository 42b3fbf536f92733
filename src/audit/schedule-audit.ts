/**
 * The audit's schedule rules beyond the Schedule machine (README "Replay and audit"): every fire's
 * job exists under its id (`fire_without_job`), and every tick due while the `sys` leader was up
 * is fired or missed with a reason that holds (`tick_coverage`). The machine already refuses a
 * fire of a disabled or deleted schedule and a second handling of a tick (the audit's
 * `illegal_transition`); ./audit.ts checks the derived job id (`schedule_rule`). Pure: the
 * Auditor hands in the commits' times and the schedule events it accepted.
 *
 * Time is the writer's clock, read from the events (a commit's time is its last event's): the
 * ticker decides ticks by that clock, so a tick and the evidence about it are on one clock.
 *
 * "Settled": a fire is committed in a sys commit before its job is submitted in the job's queue
 * partition, so a log read at any moment may hold a fire whose job is on its way. A fire is
 * settled once its queue's partition holds a commit at least FIRE_SETTLE_MS later than the fire:
 * that partition's leader was serving well after the fire, so the job should be there. An
 * unsettled fire without its job is reported as pending, not as a violation.
 *
 * "Up": the sys leader of one writer epoch holds its lease without a break (a new lease is a new
 * epoch), so from its first to its last sys commit it was up and its ticker ran. A tick is due
 * while up when one epoch's span holds its due time and goes on at least UP_GRACE_MS after it
 * (the ticker has had that long to handle it). Where the sys partition is silent (no epoch spans
 * a time) the log gives no evidence, and nothing is claimed.
 */
import { commitSeqOf, countTicks, indexOf, jitterOf, ticksAfter, toTick, isLiveStatus, type JobStatus, type Position, type ScheduleContext, type ScheduleEvent, type TemplateContext, type TimingSpec } from '../../machines/index.js';
import { subjects, SYS_PARTITION } from '../nats/subjects.js';
import { AuditRules, type AuditRule } from './types.js';

/** A fire's job must be in the log once its queue's partition has committed this much later. */
export const FIRE_SETTLE_MS = 10_000;
/** How long after a tick came due the sys leader must have gone on committing for the tick to count as due while up. */
export const UP_GRACE_MS = 10_000;

/** Where the rules report: the Auditor's violation sink. */
export interface ScheduleAuditSink {
  /** A violation of an event (index set) or of a commit (index null). */
  violate(seq: number, index: number | null, subject: string, aggregate: string, rule: AuditRule, message: string, events: readonly Position[]): void;
  /** A job's status as the audit folded it, or null when the log holds no submit of it. */
  jobStatus(jobId: string): JobStatus | null;
  /** A template's state as folded in sys. */
  template(name: string): TemplateContext | null;
}

interface EpochSpan {
  readonly node: string;
  readonly epoch: number;
  readonly first: number;
  last: number;
  lastSeq: number;
}

interface PendingFire {
  readonly at: Position;
  readonly schedule: string;
  readonly tick: string;
  /** The queue whose partition the job goes to (null when its template is not in the log). */
  readonly queue: string | null;
  readonly time: number;
}

const fmt = (ms: number): string => new Date(ms).toISOString();

/** The ticks in [from, to] (ms), both inclusive. */
function ticksWithin(spec: TimingSpec, from: number, to: number): { count: number; first: number | null } {
  if (to < from) return { count: 0, first: null };
  const first = ticksAfter(spec, from - 1).next();
  if (first.done || first.value > to) return { count: 0, first: null };
  return { count: countTicks(spec, from - 1, to + 1).count, first: first.value };
}

export class ScheduleAudit {
  /** The sys partition's writer epochs, oldest first, each with the span of its commits. */
  private readonly spans: EpochSpan[] = [];
  /** The newest commit time of each queue partition (by queue). */
  private readonly queueTimes = new Map<string, number>();
  /** Fires whose job the log does not hold yet, by job id. */
  private readonly pending = new Map<string, PendingFire>();

  constructor(private readonly sink: ScheduleAuditSink) {}

  /** A sys commit by `node` at writer epoch `epoch`, at `time` (its last event's time). */
  sysCommit(seq: number, node: string, epoch: number, time: number): void {
    if (Number.isNaN(time)) return;
    const latest = this.spans.at(-1);
    let span = latest?.epoch === epoch && latest.node === node ? latest : this.spans.find((s) => s.epoch === epoch && s.node === node);
    if (span === undefined) {
      span = { node, epoch, first: time, last: time, lastSeq: seq };
      this.spans.push(span);
    }
    span.last = Math.max(span.last, time);
    span.lastSeq = seq;
  }

  /** A commit of a queue's partition at `time`. */
  queueCommit(queue: string, time: number): void {
    if (Number.isNaN(time)) return;
    const before = this.queueTimes.get(queue);
    if (before === undefined || time > before) this.queueTimes.set(queue, time);
  }

  /** A job.submitted the audit accepted: a fire waiting for it is done. */
  jobSubmitted(jobId: string): void {
    if (this.pending.size > 0) this.pending.delete(jobId);
  }

  /** A schedule.fired or schedule.missed the machine accepted, with the schedule's state before it. */
  handled(at: Position, subject: string, aggregate: string, before: ScheduleContext, event: Extract<ScheduleEvent, { type: 'schedule.fired' | 'schedule.missed' }>): void {
    const spec = before.spec;
    if (spec === null) return;
    if (event.type === 'schedule.fired') {
      this.fired(at, before, spec, event.data.tick, event.data.job_id, Date.parse(event.time));
      if ((event.data.trigger ?? 'cron') !== 'cron') return;
      this.noGap(at, subject, aggregate, before, spec, Date.parse(event.data.tick), `tick ${event.data.tick}`);
      return;
    }
    const d = event.data;
    const from = Date.parse('tick' in d ? d.tick : d.from);
    const to = Date.parse('tick' in d ? d.tick : d.to);
    this.noGap(at, subject, aggregate, before, spec, from, `the miss of ${toTick(from)}`);
    if ('count' in d) {
      const { count } = ticksWithin(spec, from, to);
      if (count !== d.count) this.sink.violate(commitSeqOf(at), indexOf(at), subject, aggregate, AuditRules.TickCoverage, `schedule.missed from ${d.from} to ${d.to} counts ${d.count} ticks, but the spec (${spec.cron}, ${spec.timezone}) has ${count} there`, [at]);
    }
    if (d.reason === 'catchup') this.catchupWhileUp(at, subject, aggregate, spec, from, to);
  }

  /** Between handled_until and the first tick an event handles, the spec has no tick: none was skipped unrecorded. */
  private noGap(at: Position, subject: string, aggregate: string, before: ScheduleContext, spec: TimingSpec, first: number, what: string): void {
    if (before.handled_until === null) return;
    const handled = Date.parse(before.handled_until);
    const next = ticksAfter(spec, handled).next();
    if (next.done || next.value >= first) return;
    const skipped = countTicks(spec, handled, first).count;
    this.sink.violate(
      commitSeqOf(at),
      indexOf(at),
      subject,
      aggregate,
      AuditRules.TickCoverage,
      `${what} leaves ${skipped} tick${skipped === 1 ? '' : 's'} from ${toTick(next.value)} after ${before.handled_until} (handled until then) neither fired nor missed`,
      [at],
    );
  }

  /** A tick missed `catchup` was due while no ticker ran: not within an epoch's span of sys commits (with the grace after it). */
  private catchupWhileUp(at: Position, subject: string, aggregate: string, spec: TimingSpec, from: number, to: number): void {
    for (const span of this.spans) {
      // Ticks due at or after the span's first commit and at least UP_GRACE_MS before its last (jitter taken at its most).
      const lo = Math.max(from, span.first);
      const hi = Math.min(to, span.last - UP_GRACE_MS - spec.jitter_ms);
      const { count, first } = ticksWithin(spec, lo, hi);
      if (count === 0 || first === null) continue;
      this.sink.violate(
        commitSeqOf(at),
        indexOf(at),
        subject,
        aggregate,
        AuditRules.TickCoverage,
        `${count} tick${count === 1 ? '' : 's'} from ${toTick(first)} missed as catchup, but the sys leader ${span.node} (epoch ${span.epoch}) was up from ${fmt(span.first)} to ${fmt(span.last)}`,
        [at],
      );
      return;
    }
  }

  private fired(at: Position, before: ScheduleContext, spec: NonNullable<ScheduleContext['spec']>, tick: string, jobId: string, time: number): void {
    if (this.sink.jobStatus(jobId) !== null) return;
    const queue = spec.template === null ? (spec.job?.queue ?? null) : (this.sink.template(spec.template)?.spec?.queue ?? null);
    this.pending.set(jobId, { at, schedule: before.name, tick, queue, time });
  }

  /**
   * At the end of the log: each settled fire without its job is a violation (the others are
   * counted as pending); each enabled schedule's first unhandled tick must not be due while up.
   * `schedules` are the sys partition's schedules as folded at the end.
   */
  finish(schedules: Iterable<{ readonly name: string; readonly status: string; readonly context: ScheduleContext }>): { pendingFires: number } {
    let pendingFires = 0;
    for (const [jobId, fire] of this.pending) {
      const queueTime = fire.queue === null ? undefined : this.queueTimes.get(fire.queue);
      if (queueTime === undefined || Number.isNaN(fire.time) || queueTime < fire.time + FIRE_SETTLE_MS) {
        pendingFires += 1;
        continue;
      }
      this.sink.violate(
        commitSeqOf(fire.at),
        indexOf(fire.at),
        subjects.partition(SYS_PARTITION),
        `schedule:${fire.schedule}`,
        AuditRules.FireWithoutJob,
        `fire of tick ${fire.tick} names job ${jobId}, which queue ${fire.queue} never submitted, though its partition committed until ${fmt(queueTime)} (${Math.round((queueTime - fire.time) / 1000)} s after the fire)`,
        [fire.at],
      );
    }
    for (const schedule of schedules) this.stalled(schedule);
    return { pendingFires };
  }

  /** An enabled schedule whose next tick came due while the sys leader was up, and stayed unhandled to the end of the log. */
  private stalled({ name, status, context }: { readonly name: string; readonly status: string; readonly context: ScheduleContext }): void {
    const spec = context.spec;
    if (status !== 'enabled' || spec === null || context.handled_until === null) return;
    // buffer_one / buffer_all: a tick waits, unhandled, while the last fire's job is live (or not yet submitted).
    const last = context.last_fired;
    if (last !== null && (spec.overlap === 'buffer_one' || spec.overlap === 'buffer_all')) {
      const jobStatus = this.sink.jobStatus(last.job_id);
      if (jobStatus === null || isLiveStatus(jobStatus)) return;
    }
    const next = ticksAfter(spec, Date.parse(context.handled_until)).next();
    if (next.done) return;
    const due = next.value + jitterOf(spec.jitter_ms, name, toTick(next.value));
    const span = this.spans.find((s) => s.first <= due && due + UP_GRACE_MS <= s.last);
    if (span === undefined) return;
    this.sink.violate(
      span.lastSeq,
      null,
      subjects.partition(SYS_PARTITION),
      `schedule:${name}`,
      AuditRules.TickCoverage,
      `tick ${toTick(next.value)} came due at ${fmt(due)} and is neither fired nor missed, though the sys leader ${span.node} (epoch ${span.epoch}) was up until ${fmt(span.last)}`,
      [],
    );
  }

}

