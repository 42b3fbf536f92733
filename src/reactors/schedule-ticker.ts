/**
 * The schedule ticker (a SysReactor: it runs on the `sys` partition's leader once folded). Each
 * enabled schedule has one timer, at its next due tick (the planner's `nextDueAt`); a run calls
 * `tickSchedule` and appends its `schedule.fired`/`schedule.missed` events as one sys commit,
 * then submits each fired job to its queue's leader under its derived id (schedule, tick).
 *
 * A tick never fires twice: the Schedule machine refuses a fire at or before `handled_until`,
 * and only the sys writer (one per lease epoch, fenced by the partition's expected sequence)
 * appends. A job is never lost: the fire is committed first, the job second; a leader that dies
 * between the two leaves a fire without a job, and the next leader resubmits the job of every
 * schedule's last fire it finds missing on adoption (its derived id makes a resend harmless).
 */
import { isLiveStatus, type ScheduleContext, type ScheduleState } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import type { CommandContext } from '../commands/handle-command.js';
import { DocketError } from '../errors.js';
import type { Logger } from '../logger.js';
import { jobOfFire, type ScheduledJob } from '../schedules/fire.js';
import { isFiredJobLive, settleSchedule, type FireSink } from '../schedules/sys-commands.js';
import type { AggregateChange } from '../store/aggregate-store.js';
import type { JobChange } from '../store/job-store.js';
import type { SysReactor } from './sys-reactor.js';

/** After a failed run or submit (the writer not serving yet, a queue's leader away). */
const RETRY_MS = 500;
/** Runs started per turn of the event loop (startSlices). */
const RUNS_PER_SLICE = 250;
/** A timer further out than this is re-armed then (setTimeout's range; a clock moved by hand). */
const MAX_TIMER_MS = 60_000;

export interface TickerDeps {
  readonly ctx: CommandContext;
  readonly clock: Clock;
  readonly log: Logger;
  /** Whether this node leads `sys` now. */
  readonly isLeader: () => boolean;
  /** Submits a fired job on its queue's leader (router.run(queue, ...)). */
  readonly submit: (job: ScheduledJob) => Promise<void>;
  /** Cancels a live job on its queue's leader (cancel_other). */
  readonly cancel: (jobId: string) => Promise<void>;
}

function isFireOrMiss(type: string | undefined): boolean {
  return type === 'schedule.fired' || type === 'schedule.missed';
}

export class ScheduleTicker implements SysReactor, FireSink {
  private leading = false;
  private since = 0;
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly running = new Set<string>();
  private readonly again = new Set<string>();
  /** Enabled schedules, kept from every change (and restored checkpoints): needsLeader reads it on every node. */
  private readonly enabled = new Set<string>();
  /** A job a buffered tick waits for, and its schedule: when it ends, the schedule runs. */
  private readonly waitingOn = new Map<string, string>();
  private unsubscribeClock: (() => void) | undefined;
  readonly pending = new Set<string>();
  /** Schedules whose timer fired, waiting for their slice (startSlices). */
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
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
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
    // miss does not: the run that wrote it has armed the next due tick already, and any other
    // writer of one (a trigger, a backfill) leaves the due ticks to the run at that time.
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

  // --- runs ---------------------------------------------------------------------------------------

  private arm(name: string, delayMs: number): void {
    clearTimeout(this.timers.get(name));
    this.timers.delete(name);
    if (!this.leading || !this.enabled.has(name)) return;
    const timer = setTimeout(() => {
      this.timers.delete(name);
      this.due.add(name);
      this.startSlices();
    }, Math.max(0, Math.min(MAX_TIMER_MS, delayMs)));
    timer.unref();
    this.timers.set(name, timer);
  }

  /**
   * Starts the runs of due schedules RUNS_PER_SLICE at a time, a turn of the event loop apart:
   * thousands of schedules due at one instant would otherwise plan in one turn, holding off the
   * I/O that renews this node's leases (which then lapse, and the ticker with them).
   */
  private startSlices(): void {
    if (this.sliceScheduled) return;
    this.sliceScheduled = true;
    setImmediate(() => {
      this.sliceScheduled = false;
      let started = 0;
      for (const name of this.due) {
        if (started >= RUNS_PER_SLICE) break;
        this.due.delete(name);
        started += 1;
        void this.run(name);
      }
      if (this.due.size > 0) this.startSlices();
    });
  }

  private async run(name: string): Promise<void> {
    if (this.running.has(name)) {
      this.again.add(name);
      return;
    }
    if (!this.leading || !this.deps.isLeader()) return;
    this.running.add(name);
    let nextIn: number | null = null;
    try {
      const outcome = await settleSchedule(this.deps.ctx, this, name);
      if (outcome.jobs.length > 0 || outcome.cancel !== null) await this.deliver(outcome.cancel, outcome.jobs);
      const plan = outcome.plan;
      // The plan was made from the state its events were decided on: its next due tick stands.
      if (plan.more) nextIn = 0;
      else if (plan.waiting !== null) {
        const state = this.deps.ctx.aggregates.stateOf<ScheduleContext>('schedule', name);
        const live = state.context.last_fired?.job_id;
        if (live !== undefined) this.waitingOn.set(live, name);
        // The job's end re-arms through applyJob; a slow re-check covers a job not folded here yet.
        nextIn = MAX_TIMER_MS;
      } else if (plan.nextDueAt !== null) nextIn = plan.nextDueAt - this.deps.clock.now();
    } catch (err) {
      if (!(err instanceof DocketError)) this.deps.log.error({ err, schedule: name }, 'schedule tick failed');
      else this.deps.log.debug({ err, schedule: name }, 'schedule tick refused; retrying');
      nextIn = RETRY_MS;
    } finally {
      this.running.delete(name);
    }
    if (this.again.delete(name)) nextIn = 0;
    if (nextIn !== null) this.arm(name, nextIn);
  }

  /** Submits one fired job; on failure retries it (the fire is committed: its job must follow). */
  private async submitOne(job: ScheduledJob): Promise<void> {
    try {
      await this.deps.submit(job);
      this.pending.delete(job.job_id);
    } catch (err) {
      this.deps.log.warn({ err, job_id: job.job_id, queue: job.queue }, 'submitting a fired job failed; retrying');
      const timer = setTimeout(() => {
        if (this.leading) void this.submitOne(job);
      }, RETRY_MS);
      timer.unref();
    }
  }

  /**
   * On adoption: the job of each schedule's last fire, when the store does not hold it (the
   * previous leader died between the fire's commit and the job's). Earlier fires' jobs were
   * submitted before their schedule's next run, so the last fire is the only one that can lack one.
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
