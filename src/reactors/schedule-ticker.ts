/**
 * The schedule ticker (a SysReactor: it runs on the `sys` partition's leader once folded).
 *
 * Passes, not per-schedule runs: each enabled schedule is indexed by the instant it must be
 * looked at next (its next due tick, FIRE_AHEAD_MS early), with one timer per distinct instant.
 * At the instant one pass decides every schedule then due with the pure planner
 * (`tickSchedule`), PASS_SLICE schedules per turn of the event loop (so thousands due at one
 * instant leave room for the I/O that renews this node's leases), and queues their
 * `schedule.fired`/`schedule.missed` events in the sys writer without an await between decision
 * and queueing; the writer group-commits a slice's events into as few commits as fit. Once
 * committed, the fired jobs go to their queues' leaders as batches (`schedule.submit_batch`,
 * SUBMIT_CHUNK jobs a request), not one router call per job.
 *
 * Fire ahead: a tick is decided FIRE_AHEAD_MS before it is due when no decision could differ at
 * its due time (`mayFireAhead`: overlap `allow_all`, or the previous fire's job has ended and no
 * jitter): its fire is committed then, its job with run_at = the due time, so the job is stored
 * before the tick and claimable at it. Any other tick is decided when due. A disable, delete or
 * template archive committed within the lead before a tick decided ahead does not stop that
 * tick: it was decided while the schedule could fire (README "Schedules and templates").
 *
 * A tick never fires twice: the Schedule machine refuses a fire at or before `handled_until`,
 * and only the sys writer (one per lease epoch, fenced by the partition's expected sequence)
 * appends. A job is never lost: the fire is committed first, the job second; a leader that dies
 * between the two leaves a fire without a job, and the next leader resubmits the job of every
 * schedule's last fire it finds missing on adoption (its derived id makes a resend harmless). A
 * schedule is looked at again only once its fires' jobs are answered, so only its last fire can
 * lack its job.
 */
import { isLiveStatus, type ScheduleContext, type ScheduleState } from '../../machines/index.js';
import type { Plan } from '../../machines/schedule-timing.js';
import type { Clock } from '../clock.js';
import type { CommandContext } from '../commands/handle-command.js';
import { DocketError } from '../errors.js';
import type { Logger } from '../logger.js';
import { SYS_LEASE } from '../nats/subjects.js';
import { jobOfFire, type ScheduledJob } from '../schedules/fire.js';
import { isFiredJobLive, settleSchedule, settleScheduleInPass, type FireSink, type PassPart } from '../schedules/sys-commands.js';
import type { AggregateChange } from '../store/aggregate-store.js';
import type { JobChange } from '../store/job-store.js';
import type { SysReactor } from './sys-reactor.js';

/** After a failed run or submit (the writer not serving yet, a queue's leader away). */
const RETRY_MS = 500;
/** Schedules a pass decides per turn of the event loop. */
const PASS_SLICE = 1_000;
/** A timer further out than this is re-armed then (setTimeout's range; a clock moved by hand). */
const MAX_TIMER_MS = 60_000;
/**
 * Fire ahead: how long before its due time a tick is decided when mayFireAhead allows. Meant to
 * let a pass commit its fires and jobs before the tick (1,000 every-second schedules do with
 * room to spare; 10,000 need ~550 ms of node CPU, more than a loaded machine gives: README
 * "Performance"); short enough that a change made that close to a tick is a change "at" it.
 * Less than a second (the closest two ticks of a cron can be), so a pass decides at most one
 * tick ahead per schedule that is not allow_all.
 */
export const FIRE_AHEAD_MS = 500;
/** Fired jobs per submit_batch request: a request to a queue's leader elsewhere stays well under NATS's max payload. */
const SUBMIT_CHUNK = 500;

export interface FiredJobAnswer {
  readonly ok: boolean;
}

export interface TickerDeps {
  readonly ctx: CommandContext;
  readonly clock: Clock;
  readonly log: Logger;
  /** Whether this node leads `sys` now. */
  readonly isLeader: () => boolean;
  /** Submits a fired job on its queue's leader (router.run(queue, ...)). */
  readonly submit: (job: ScheduledJob) => Promise<void>;
  /** Submits fired jobs of one queue on its leader at once; one answer per job, in order. */
  readonly submitBatch: (queue: string, jobs: readonly ScheduledJob[]) => Promise<readonly FiredJobAnswer[]>;
  /** Cancels a live job on its queue's leader (cancel_other). */
  readonly cancel: (jobId: string) => Promise<void>;
}

function isFireOrMiss(type: string | undefined): boolean {
  return type === 'schedule.fired' || type === 'schedule.missed';
}

export class ScheduleTicker implements SysReactor, FireSink {
  private leading = false;
  private since = 0;
  /** The instant each armed schedule is to be looked at, and the schedules of each instant (one timer per instant). */
  private readonly wakeOf = new Map<string, number>();
  private readonly atInstant = new Map<number, Set<string>>();
  private readonly instantTimers = new Map<number, NodeJS.Timeout>();
  /** Schedules being decided or delivered (from their decision until their jobs are answered). */
  private readonly running = new Set<string>();
  private readonly again = new Set<string>();
  /** Enabled schedules, kept from every change (and restored checkpoints): needsLeader reads it on every node. */
  private readonly enabled = new Set<string>();
  /** A job a buffered tick waits for, and its schedule: when it ends, the schedule runs. */
  private readonly waitingOn = new Map<string, string>();
  private unsubscribeClock: (() => void) | undefined;
  readonly pending = new Set<string>();
  /** Schedules whose instant came, waiting for the pass's next slice. */
  private readonly due = new Set<string>();
  private sliceScheduled = false;

  constructor(private readonly deps: TickerDeps) {
    for (const record of deps.ctx.aggregates.values()) if (record.kind === 'schedule' && record.state.value === 'enabled') this.enabled.add(record.id);
  }

  // --- SysReactor ---------------------------------------------------------------------------------

  adopt(): void {
    this.leading = true;
    // Ticks due before now were due while no ticker ran here: the catch-up policy decides them.
    this.since = this.deps.clock.now();
    this.unsubscribeClock?.();
    this.unsubscribeClock = this.deps.clock.onChange?.(() => {
      for (const name of this.enabled) this.arm(name, 0);
    });
    void this.resubmitMissing().finally(() => {
      for (const name of this.enabled) this.arm(name, 0);
    });
    this.deps.log.info({ schedules: this.enabled.size }, 'schedule ticker adopted sys');
  }

  drop(): void {
    this.leading = false;
    this.unsubscribeClock?.();
    this.unsubscribeClock = undefined;
    for (const timer of this.instantTimers.values()) clearTimeout(timer);
    this.instantTimers.clear();
    this.atInstant.clear();
    this.wakeOf.clear();
    this.due.clear();
    this.waitingOn.clear();
    this.pending.clear();
  }

  needsLeader(): boolean {
    return this.enabled.size > 0;
  }

  stop(): void {
    this.drop();
  }

  // --- FireSink (the sys commands settle due ticks through the same rules) -----------------------

  upSince(): number {
    return this.leading ? this.since : this.deps.clock.now();
  }

  isJobLive(jobId: string): boolean {
    return isFiredJobLive(this.deps.ctx, jobId);
  }

  async deliver(cancel: string | null, jobs: readonly ScheduledJob[]): Promise<void> {
    if (cancel !== null) {
      try {
        await this.deps.cancel(cancel);
      } catch (err) {
        // Ended meanwhile (the machine refused): nothing to cancel.
        if (!(err instanceof DocketError)) this.deps.log.warn({ err, job_id: cancel }, 'cancel_other: cancelling the live job failed');
      }
    }
    for (const job of jobs) await this.submitOne(job);
  }

  // --- folded changes -----------------------------------------------------------------------------

  readonly applyAggregate = (change: AggregateChange): void => {
    if (change.after.kind !== 'schedule') return;
    const name = change.after.id;
    if (change.after.state.value === 'enabled') this.enabled.add(name);
    else this.enabled.delete(name);
    // Any change re-plans (a new cron, an enable); during a run, once that run ends. A fire or a
    // miss does not: the pass that wrote it arms the next due tick, and any other writer of one
    // (a trigger, a backfill) leaves the due ticks to the pass at that time.
    if (!this.leading || isFireOrMiss(change.event?.type)) return;
    if (this.running.has(name)) this.again.add(name);
    else this.arm(name, 0);
  };

  readonly applyJob = (change: JobChange): void => {
    if (!this.leading || this.waitingOn.size === 0) return;
    const name = this.waitingOn.get(change.after.jobId);
    if (name === undefined || isLiveStatus(change.after.state.job.value)) return;
    this.waitingOn.delete(change.after.jobId);
    this.arm(name, 0);
  };

  // --- timers: one per distinct instant -----------------------------------------------------------

  private unarm(name: string): void {
    const at = this.wakeOf.get(name);
    if (at === undefined) return;
    this.wakeOf.delete(name);
    const names = this.atInstant.get(at);
    if (names === undefined) return;
    names.delete(name);
    if (names.size > 0) return;
    this.atInstant.delete(at);
    clearTimeout(this.instantTimers.get(at));
    this.instantTimers.delete(at);
  }

  private arm(name: string, delayMs: number): void {
    this.armAt(name, this.deps.clock.now() + Math.max(0, delayMs));
  }

  /** Looks at the schedule at instant `at` (schedules of one cron share the instant, and its timer). */
  private armAt(name: string, at: number): void {
    this.unarm(name);
    if (!this.leading || !this.enabled.has(name)) return;
    const delayMs = Math.max(0, at - this.deps.clock.now());
    this.wakeOf.set(name, at);
    const names = this.atInstant.get(at);
    if (names !== undefined) {
      names.add(name);
      return;
    }
    this.atInstant.set(at, new Set([name]));
    const timer = setTimeout(() => this.instantCame(at), Math.max(0, Math.min(MAX_TIMER_MS, delayMs)));
    timer.unref();
    this.instantTimers.set(at, timer);
  }

  /** An instant's timer: its schedules join the pass (one beyond MAX_TIMER_MS plans, finds nothing due, and re-arms). */
  private instantCame(at: number): void {
    this.instantTimers.delete(at);
    const names = this.atInstant.get(at);
    this.atInstant.delete(at);
    if (names === undefined) return;
    for (const name of names) {
      this.wakeOf.delete(name);
      this.due.add(name);
    }
    this.startSlice();
  }

  /** When to look at a schedule again after its plan (an instant); null: not until a change. */
  private nextWake(name: string, plan: Plan): number | null {
    const now = this.deps.clock.now();
    if (plan.more) return now;
    if (plan.waiting !== null) {
      const state = this.deps.ctx.aggregates.stateOf<ScheduleContext>('schedule', name);
      const live = state.context.last_fired?.job_id;
      if (live !== undefined) this.waitingOn.set(live, name);
      // The job's end re-arms through applyJob; a slow re-check covers a job not folded here yet.
      return now + MAX_TIMER_MS;
    }
    if (plan.nextDueAt === null) return null;
    // FIRE_AHEAD_MS early, in case the tick may be decided ahead; within the lead already (it
    // may not: the plan just made left it), at its due time.
    const ahead = plan.nextDueAt - FIRE_AHEAD_MS;
    return ahead > now ? ahead : plan.nextDueAt;
  }

  /** A schedule's part of a pass is over: look at it again at `at` (at once after a change meanwhile). */
  private finish(name: string, at: number | null): void {
    this.running.delete(name);
    if (this.again.delete(name)) at = this.deps.clock.now();
    if (at !== null) this.armAt(name, at);
  }

  private retryAt(): number {
    return this.deps.clock.now() + RETRY_MS;
  }

  // --- passes -------------------------------------------------------------------------------------

  private startSlice(): void {
    if (this.sliceScheduled) return;
    this.sliceScheduled = true;
    setImmediate(() => {
      this.sliceScheduled = false;
      void this.slice();
    });
  }

  /**
   * One slice of a pass: up to PASS_SLICE due schedules decided and queued in the sys writer in
   * one turn of the event loop (no await between a decision and its queueing); then, once
   * committed, their jobs delivered. The next slice starts a turn later.
   */
  private async slice(): Promise<void> {
    if (!this.leading || !this.deps.isLeader()) {
      this.due.clear();
      return;
    }
    let writer;
    try {
      writer = await this.deps.ctx.writer(SYS_LEASE);
    } catch (err) {
      this.deps.log.debug({ err }, 'schedule pass: the sys writer is not serving; retrying');
      for (const name of this.due) this.arm(name, RETRY_MS);
      this.due.clear();
      return;
    }
    const parts: { readonly name: string; readonly part: PassPart }[] = [];
    for (const name of this.due) {
      if (parts.length >= PASS_SLICE) break;
      this.due.delete(name);
      if (this.running.has(name)) {
        this.again.add(name);
        continue;
      }
      if (!this.leading || !this.enabled.has(name)) continue;
      const part = settleScheduleInPass(this.deps.ctx, this, writer, name, FIRE_AHEAD_MS);
      if (part === null) {
        // An event of the schedule waits in the writer (a command's): decided after its commit.
        void this.run(name);
        continue;
      }
      this.running.add(name);
      parts.push({ name, part });
    }
    if (this.due.size > 0) this.startSlice();
    if (parts.length > 0) await this.deliverPass(parts);
  }

  /** The jobs of a slice's committed fires, one batch per queue; cancel_other's (rare) one schedule at a time. */
  private async deliverPass(parts: readonly { readonly name: string; readonly part: PassPart }[]): Promise<void> {
    const outcomes = await Promise.allSettled(parts.map((p) => p.part.committed));
    const byQueue = new Map<string, { job: ScheduledJob; name: string }[]>();
    const jobsLeft = new Map<string, number>();
    outcomes.forEach((outcome, i) => {
      const { name, part } = parts[i]!;
      if (outcome.status === 'rejected') {
        const err: unknown = outcome.reason;
        if (!(err instanceof DocketError)) this.deps.log.error({ err, schedule: name }, 'schedule tick failed');
        else this.deps.log.debug({ err, schedule: name }, 'schedule tick refused; retrying');
        this.finish(name, this.retryAt());
        return;
      }
      const { cancel, jobs, plan } = part.toDeliver;
      if (cancel !== null) {
        void this.deliver(cancel, jobs).finally(() => this.finish(name, this.nextWake(name, plan)));
        return;
      }
      if (jobs.length === 0) {
        this.finish(name, this.nextWake(name, plan));
        return;
      }
      jobsLeft.set(name, jobs.length);
      for (const job of jobs) {
        const list = byQueue.get(job.queue) ?? [];
        if (list.length === 0) byQueue.set(job.queue, list);
        list.push({ job, name });
      }
    });
    const plans = new Map(parts.map((p) => [p.name, p.part.toDeliver.plan]));
    const chunks: { queue: string; items: { job: ScheduledJob; name: string }[] }[] = [];
    for (const [queue, items] of byQueue) for (let i = 0; i < items.length; i += SUBMIT_CHUNK) chunks.push({ queue, items: items.slice(i, i + SUBMIT_CHUNK) });
    await Promise.all(
      chunks.map(async ({ queue, items }) => {
        await this.submitChunk(
          queue,
          items.map((item) => item.job),
        );
        for (const { name } of items) {
          const left = jobsLeft.get(name)! - 1;
          jobsLeft.set(name, left);
          if (left === 0) this.finish(name, this.nextWake(name, plans.get(name)!));
        }
      }),
    );
  }

  /** Fired jobs of one queue at once; a job not answered ok is retried on its own (its fire is committed: its job must follow). */
  private async submitChunk(queue: string, jobs: readonly ScheduledJob[]): Promise<void> {
    let answers: readonly FiredJobAnswer[] | null = null;
    try {
      answers = await this.deps.submitBatch(queue, jobs);
    } catch (err) {
      this.deps.log.warn({ err, queue, jobs: jobs.length }, 'submitting fired jobs failed; retrying');
    }
    jobs.forEach((job, i) => {
      if (answers?.[i]?.ok === true) this.pending.delete(job.job_id);
      else this.retrySubmit(job);
    });
  }

  /** A schedule decided on its own: an event of it waited in the writer when its pass came. */
  private async run(name: string): Promise<void> {
    if (this.running.has(name)) {
      this.again.add(name);
      return;
    }
    if (!this.leading || !this.deps.isLeader()) return;
    this.running.add(name);
    let nextAt: number | null = null;
    try {
      const outcome = await settleSchedule(this.deps.ctx, this, name, FIRE_AHEAD_MS);
      if (outcome.jobs.length > 0 || outcome.cancel !== null) await this.deliver(outcome.cancel, outcome.jobs);
      // The plan was made from the state its events were decided on: its next due tick stands.
      nextAt = this.nextWake(name, outcome.plan);
    } catch (err) {
      if (!(err instanceof DocketError)) this.deps.log.error({ err, schedule: name }, 'schedule tick failed');
      else this.deps.log.debug({ err, schedule: name }, 'schedule tick refused; retrying');
      nextAt = this.retryAt();
    }
    this.finish(name, nextAt);
  }

  /** Submits one fired job; on failure retries it (the fire is committed: its job must follow). */
  private async submitOne(job: ScheduledJob): Promise<void> {
    try {
      await this.deps.submit(job);
      this.pending.delete(job.job_id);
    } catch (err) {
      this.deps.log.warn({ err, job_id: job.job_id, queue: job.queue }, 'submitting a fired job failed; retrying');
      this.retrySubmit(job);
    }
  }

  private retrySubmit(job: ScheduledJob): void {
    const timer = setTimeout(() => {
      if (this.leading) void this.submitOne(job);
    }, RETRY_MS);
    timer.unref();
  }

  /**
   * On adoption: the job of each schedule's last fire, when the store does not hold it (the
   * previous leader died between the fire's commit and the job's). Earlier fires' jobs were
   * answered before their schedule was looked at again, so the last fire is the only one that can lack one.
   */
  private async resubmitMissing(): Promise<void> {
    const { ctx } = this.deps;
    for (const record of [...ctx.aggregates.values()]) {
      if (record.kind !== 'schedule') continue;
      const state = record.state as ScheduleState;
      const last = state.context.last_fired;
      if (last === null || ctx.store.has(last.job_id)) continue;
      const templateName = state.context.spec?.template ?? null;
      const template = templateName === null ? null : (ctx.aggregates.get('template', templateName)?.state as never);
      const job = jobOfFire(state, template ?? null, last.tick, last.job_id, last.trigger);
      if (job === null) continue;
      this.deps.log.info({ schedule: record.id, tick: last.tick, job_id: last.job_id }, 'resubmitting the job of a fire its leader did not submit');
      await this.submitOne(job);
    }
  }
}
