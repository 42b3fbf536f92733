/**
 * What a schedule's fire appends, decided from folded state: the `sys` leader's ticker calls
 * `tickSchedule` for a schedule whose next tick is due and appends what it returns (the schedule
 * events in one sys commit, then each job in its queue's partition); `triggerFire` does the same
 * for docket.cmd.schedule.trigger, `backfillFires` for schedule.backfill. Pure apart from the
 * derived ids (src/ids.ts): no clock, no I/O; `now`, `upSince` and the job store's answer come
 * in as arguments. Nothing here is wired yet (it waits for the sys partition).
 */
import type { BackoffPolicy, FireTrigger, JsonObject, ScheduleMissedData, ScheduleState, TemplateState } from '../../machines/index.js';
import { EMPTY_PLAN, jitterOf, planTicks, toTick, type Plan } from '../../machines/schedule-timing.js';
import { scheduledJobId, triggeredJobId } from '../ids.js';
import type { Mutable } from '../mutable.js';

/** The job a fire makes: a submit's fields, its derived id, and where it came from. */
export interface ScheduledJob {
  readonly job_id: string;
  readonly queue: string;
  /** The template's (or the schedule's own job's) params, then the schedule's params over them, shallow by key. */
  readonly params: JsonObject;
  readonly priority?: number;
  readonly max_attempts?: number;
  readonly backoff?: BackoffPolicy;
  /** The template's lease for the job's runs, when it names one. */
  readonly lease_ms?: number;
  readonly schedule: string;
  readonly tick: string;
  readonly trigger: FireTrigger;
  /**
   * A cron fire's due instant (tick + jitter, ISO UTC): the job's run_at is the later of it and
   * its submit, so a tick fired ahead (the ticker's lead) becomes claimable at its due time.
   */
  readonly due_at?: string;
  /** The template and revision it was made from (null for a schedule with its own job). */
  readonly template: { readonly name: string; readonly revision: number } | null;
}

export type ScheduleEventData = { readonly type: 'schedule.fired'; readonly data: { tick: string; job_id: string; trigger?: FireTrigger } } | { readonly type: 'schedule.missed'; readonly data: ScheduleMissedData };

export interface TickResult {
  /** The schedule's events, in order: one sys commit. */
  readonly events: readonly ScheduleEventData[];
  /** One job per fire, to submit after the sys commit (their ids are derived: a resend makes nothing twice). */
  readonly jobs: readonly ScheduledJob[];
  /** cancel_other: the live job to cancel before the fires. */
  readonly cancel: string | null;
  readonly plan: Plan;
}

/** Whether the template a schedule names can make jobs now (missing counts as archived: its ticks are missed). */
function templateUsable(template: TemplateState | null): boolean {
  return template !== null && template.value === 'active' && template.context.spec !== null;
}

/** The job of one fire, or null when the schedule names a template that cannot make jobs. */
export function jobOfFire(schedule: ScheduleState, template: TemplateState | null, tick: string, jobId: string, trigger: FireTrigger): ScheduledJob | null {
  const spec = schedule.context.spec;
  if (spec === null) return null;
  let source: ScheduleJobSource;
  let made: ScheduledJob['template'] = null;
  if (spec.template !== null) {
    if (!templateUsable(template)) return null;
    const t = template!.context.spec!;
    source = t;
    made = { name: t.name, revision: t.revision };
  } else {
    source = spec.job!;
  }
  // One object, its optional fields set on it, not a spread per optional field: a ticker pass
  // makes one per fire (10,000 a second for 10,000 every-second schedules).
  const job: Mutable<ScheduledJob> = { job_id: jobId, schedule: schedule.context.name, tick, trigger, queue: source.queue, params: paramsOf(source.params, spec.params), template: made };
  if (trigger === 'cron') {
    // A cron fire's job is claimable from its due time (tick + jitter): it may be decided ahead.
    // A tick is toTick's own text, so without jitter it is its due time as it is (no parse and format again per fire).
    const jitter = jitterOf(spec.jitter_ms, schedule.context.name, tick);
    job.due_at = jitter === 0 ? tick : toTick(Date.parse(tick) + jitter);
  }
  if (source.priority !== undefined) job.priority = source.priority;
  if (source.max_attempts !== undefined) job.max_attempts = source.max_attempts;
  if (source.backoff !== undefined) job.backoff = source.backoff;
  if (spec.template !== null && source.lease_ms !== undefined) job.lease_ms = source.lease_ms;
  return job;
}

/** What a fire's job takes from its template, or from the schedule's own job. */
interface ScheduleJobSource {
  readonly queue: string;
  readonly params?: JsonObject | undefined;
  readonly priority?: number | undefined;
  readonly max_attempts?: number | undefined;
  readonly backoff?: BackoffPolicy | undefined;
  readonly lease_ms?: number | undefined;
}

/** The source's params, then the schedule's over them, shallow by key; a fresh object either way. */
function paramsOf(base: JsonObject | undefined, overrides: JsonObject | null | undefined): JsonObject {
  if (overrides === null || overrides === undefined) return base === undefined ? {} : { ...base };
  return { ...base, ...overrides };
}

/**
 * Whether a schedule's next tick may be decided ahead of its due time (the ticker's lead): only
 * when no decision could differ at the due time. With `allow_all` the live job does not matter;
 * otherwise only when the previous fire's job has ended (nothing of this schedule is live, and
 * only the schedule's own fires make its jobs) and no jitter can bring two ticks within the lead
 * (crons are at least a second apart, the lead less). Else the tick is decided when due.
 */
export function mayFireAhead(spec: { readonly overlap: string; readonly jitter_ms: number }, previousJobLive: boolean): boolean {
  return spec.overlap === 'allow_all' || (!previousJobLive && spec.jitter_ms === 0);
}

/**
 * One ticker run for one enabled schedule: the planner's steps as events, the jobs of its fires
 * (ids from (schedule, tick)), and the job to cancel for cancel_other. `isJobLive` asks the job
 * store whether a job is waiting, queued or running; a fired job the store does not know yet (its
 * submit not yet folded, or lost with a leader that died between the two commits) must count as
 * live: it is about to exist.
 */
export function tickSchedule(input: {
  readonly schedule: ScheduleState;
  readonly template: TemplateState | null;
  readonly now: number;
  readonly upSince: number;
  readonly isJobLive: (jobId: string) => boolean;
  /** Fire ahead: ticks due within this many ms after `now` are decided now when mayFireAhead (0: none). */
  readonly aheadMs?: number;
}): TickResult {
  const { schedule, template, now, upSince } = input;
  const ctx = schedule.context;
  if (schedule.value !== 'enabled' || ctx.spec === null || ctx.handled_until === null) return { events: [], jobs: [], cancel: null, plan: EMPTY_PLAN };
  const lastJob = ctx.last_fired?.job_id ?? null;
  const previousJobLive = lastJob !== null && input.isJobLive(lastJob);
  const plan = planTicks({
    spec: ctx.spec,
    seed: ctx.name,
    handledUntil: ctx.handled_until,
    enabledSince: ctx.enabled_since,
    now,
    ...(input.aheadMs !== undefined && input.aheadMs > 0 && mayFireAhead(ctx.spec, previousJobLive) ? { decideUntil: now + input.aheadMs } : {}),
    upSince,
    previousJobLive,
    templateArchived: ctx.spec.template !== null && !templateUsable(template),
  });
  const events: ScheduleEventData[] = [];
  const jobs: ScheduledJob[] = [];
  for (const step of plan.steps) {
    if (step.kind === 'missed') {
      events.push({ type: 'schedule.missed', data: step.data });
      continue;
    }
    const jobId = scheduledJobId(ctx.name, step.tick);
    const job = jobOfFire(schedule, template, step.tick, jobId, 'cron');
    // templateArchived above makes the planner miss every tick when the template cannot make jobs.
    if (job === null) throw new Error(`schedule ${ctx.name}: a fire without a usable template`);
    events.push({ type: 'schedule.fired', data: { tick: step.tick, job_id: jobId } });
    jobs.push(job);
  }
  return { events, jobs, cancel: plan.cancelPrevious ? lastJob : null, plan };
}

/** docket.cmd.schedule.trigger: one manual fire at `now`, its job id from the trigger's command id. */
export function triggerFire(schedule: ScheduleState, template: TemplateState | null, commandId: string, now: number): { event: ScheduleEventData; job: ScheduledJob } | null {
  const tick = toTick(now);
  const jobId = triggeredJobId(schedule.context.name, commandId);
  const job = jobOfFire(schedule, template, tick, jobId, 'manual');
  if (job === null) return null;
  return { event: { type: 'schedule.fired', data: { tick, job_id: jobId, trigger: 'manual' } }, job };
}

/**
 * docket.cmd.schedule.backfill: a fire per tick of the range (checkBackfill lists them) that has
 * no job yet. A tick's job id is the cron's for that tick, so a tick the cron fired (or an
 * earlier backfill) is found by `jobExists` and skipped: one fire per (schedule, tick).
 */
export function backfillFires(schedule: ScheduleState, template: TemplateState | null, ticks: readonly string[], jobExists: (jobId: string) => boolean): { events: ScheduleEventData[]; jobs: ScheduledJob[]; skipped: string[] } {
  const events: ScheduleEventData[] = [];
  const jobs: ScheduledJob[] = [];
  const skipped: string[] = [];
  for (const tick of ticks) {
    const jobId = scheduledJobId(schedule.context.name, tick);
    const job = jobExists(jobId) ? null : jobOfFire(schedule, template, tick, jobId, 'backfill');
    if (job === null) {
      skipped.push(tick);
      continue;
    }
    events.push({ type: 'schedule.fired', data: { tick, job_id: jobId, trigger: 'backfill' } });
    jobs.push(job);
  }
  return { events, jobs, skipped };
}
