/**
 * Retrier (leader only).
 *
 * A failed job with attempts left gets its retry at once: a new job whose id is derived from
 * (failed job, attempt), so creating it twice is impossible; it waits in the queue until
 * run_at = failure time + backoff (jitter derived from the job id). On start or takeover the
 * retrier looks at every failed job of the queue and creates the missing retries (DESIGN's
 * recovery matrix), idempotently.
 */
import { backoffDelayMs, shouldRetry, type JobEvent } from '../../machines/index.js';
import { toIso } from '../clock.js';
import { createJob, envelope, findJob, type CommandContext, type CommandMeta, type Created } from '../commands/handle-command.js';
import { InvalidTransitionError } from '../errors.js';
import { canonicalJson, eventIdFor, keyedJobId, retryJobId } from '../ids.js';
import type { Logger } from '../logger.js';
import type { JobChange, JobRecord } from '../store/job-store.js';
import { doublingDelayMs, TRY_AGAIN } from '../timing.js';

/** The canonical key of a keyed job, or null. */
function keyOf(record: JobRecord): string | null {
  const key = record.state.job.context.key;
  return key === null ? null : canonicalJson(key);
}

/**
 * The id of a failed job's retry. Unkeyed: derived from (failed job, attempt). Keyed: the key's
 * next generation, the id a keyed submit would take, so a retry and a submit of the key racing
 * on two nodes are one append (expected sequence 0) and one live job.
 */
function retryIdOf(ctx: CommandContext, failed: JobRecord): string {
  const key = keyOf(failed);
  if (key === null) return retryJobId(failed.jobId, failed.state.job.context.attempt);
  return keyedJobId(failed.queue, key, ctx.keys.generations(failed.queue, key));
}

/** The id of the job that followed the failed one: its retry, or (keyed) any newer job of its key; its body may be evicted. */
export function successorId(ctx: Pick<CommandContext, 'store' | 'keys'>, failed: JobRecord): string | undefined {
  const key = keyOf(failed);
  if (key === null) {
    const retryId = retryJobId(failed.jobId, failed.state.job.context.attempt);
    return ctx.store.has(retryId) ? retryId : undefined;
  }
  const latest = ctx.keys.latestJob(failed.queue, key);
  return latest !== undefined && latest !== failed.jobId ? latest : undefined;
}

/** Has the failed job already been followed: its retry, or (keyed) any newer job of its key? Undefined also when that job's body is evicted (see successorId). */
export function superseded(ctx: Pick<CommandContext, 'store' | 'keys'>, failed: JobRecord): JobRecord | undefined {
  const next = successorId(ctx, failed);
  return next === undefined ? undefined : ctx.store.get(next);
}

/** What a retry of a job comes to: its retry exists already, or the job.submitted to append. */
export type RetryPlan =
  | { readonly kind: 'exists'; readonly record: JobRecord }
  | { readonly kind: 'submit'; readonly event: Extract<JobEvent, { type: 'job.submitted' }> };

export interface RetryOptions {
  /** By hand (`docket retry`, `retry_all`): a cancelled job too, due now, the chain's budget extended by one. */
  readonly manual: boolean;
  /** The submit's event id for the retry's id, and its meta, for a command that carries its own (retry_all); else derived from the job. */
  readonly eventIdFor?: (retryId: string) => string;
  readonly meta?: CommandMeta;
}

/**
 * The decision of a retry of a failed (or, by hand, cancelled) job, on the state as it is now
 * (synchronous: a caller deciding many at once hands them to the writer without an await
 * between). Throws InvalidTransitionError when the job cannot be retried.
 */
export function planRetry(ctx: CommandContext, failed: JobRecord, options: RetryOptions): RetryPlan {
  const job = failed.state.job.context;
  const status = failed.state.job.value;
  if (status !== 'failed' && !(options.manual && status === 'cancelled')) {
    throw new InvalidTransitionError(`only a failed${options.manual ? ' or cancelled' : ''} job can be retried; job ${failed.jobId} is ${status}`);
  }
  const next = superseded(ctx, failed);
  const evicted = next === undefined ? successorId(ctx, failed) : undefined;
  // createRetry reads an evicted follower back first; a synchronous caller is told.
  if (evicted !== undefined) throw new InvalidTransitionError(`job ${failed.jobId} was followed by job ${evicted}, which has ended`, { details: { job_id: evicted } });
  if (next) {
    if (next.state.job.context.retry_of === failed.jobId) return { kind: 'exists', record: next };
    throw new InvalidTransitionError(`job ${failed.jobId} is superseded by job ${next.jobId} of the same key`, { details: { job_id: next.jobId } });
  }
  const attempt = job.attempt + 1;
  const retryId = retryIdOf(ctx, failed);
  const finishedMs = job.finished_at === null ? ctx.clock.now() : Date.parse(job.finished_at);
  const runAtMs = options.manual ? ctx.clock.now() : finishedMs + backoffDelayMs(job.backoff, job.attempt, failed.jobId);
  // The automatic and the manual retry are different commands: a manual retry of a job whose
  // automatic retry exists finds that job (created:false) rather than claiming it as its own.
  const eventId = options.eventIdFor?.(retryId) ?? eventIdFor(`${options.manual ? 'manual-retry' : 'retry'}:${failed.jobId}`, retryId);
  const event = envelope(ctx, 'job.submitted', { queue: failed.queue, jobId: retryId }, eventId, {
    job_id: retryId,
    key: job.key,
    params: job.params,
    priority: job.priority,
    position: null,
    run_at: toIso(runAtMs),
    // A retry by hand extends the chain's budget by one so the audit's rule still holds.
    max_attempts: Math.max(job.max_attempts, attempt),
    backoff: job.backoff,
    attempt,
    retry_of: failed.jobId,
    waiting: false,
    ...(job.concurrency_key === null ? {} : { concurrency_key: job.concurrency_key }),
  }, options.meta);
  return { kind: 'submit', event };
}

/** Creates the retry of a failed (or, by hand, cancelled) job. Idempotent by its derived id. */
export async function createRetry(ctx: CommandContext, failed: JobRecord, options: RetryOptions): Promise<Created> {
  const next = successorId(ctx, failed);
  if (next !== undefined && ctx.store.get(next) === undefined) await findJob(ctx, next);
  const plan = planRetry(ctx, failed, options);
  if (plan.kind === 'exists') return { record: plan.record, created: false };
  return createJob(ctx, plan.event);
}

/** Whether a failed job gets an automatic retry by its policy (whether or not it exists yet). */
export function getsRetry(record: JobRecord): boolean {
  if (record.state.job.value !== 'failed') return false;
  const job = record.state.job.context;
  const run = record.state.run.context;
  return shouldRetry({ reason: run.failure_reason, error: run.error, attempt: job.attempt, max_attempts: job.max_attempts });
}

export class Retrier {
  /** Jobs whose retry failed to append, by job id: the timer of the next try. */
  private readonly again = new Map<string, { readonly queue: string; readonly timer: NodeJS.Timeout }>();

  constructor(
    private readonly ctx: CommandContext,
    private readonly isLeader: (queue: string) => boolean,
    private readonly log: Logger,
  ) {}

  private needsRetry(record: JobRecord): boolean {
    // Its retry exists, or (keyed) a newer job of the key supersedes it: one live job per key.
    return getsRetry(record) && successorId(this.ctx, record) === undefined;
  }

  readonly apply = (change: JobChange): void => {
    if (change.after.state.job.value !== 'failed' || change.before?.state.job.value === 'failed') return;
    if (!change.recorded || !this.isLeader(change.after.queue)) return;
    if (this.needsRetry(change.after)) void this.retry(change.after);
  };

  /** Leading `queue` from now: create every missing retry. */
  adopt(queue: string, records: Iterable<JobRecord>): void {
    for (const record of records) if (record.queue === queue && this.needsRetry(record)) void this.retry(record);
  }

  private async retry(record: JobRecord, tries = 0): Promise<void> {
    try {
      const { record: retry, created } = await createRetry(this.ctx, record, { manual: false });
      if (created) this.log.info({ queue: record.queue, jobId: record.jobId, retryId: retry.jobId, attempt: retry.state.job.context.attempt }, 'retry created');
    } catch (err) {
      if (err instanceof InvalidTransitionError) {
        // A decision, not a failure: the job is no longer one to retry.
        this.log.warn({ err, queue: record.queue, jobId: record.jobId }, 'retry not created');
        return;
      }
      // The append failed (NATS unavailable, the stream refusing): nothing else would ask again
      // until leadership changes, so try again, for as long as this node leads the queue and
      // the job still lacks its retry.
      // One chain per job: adopt() after a new lead finds the job again.
      if (this.again.has(record.jobId)) return;
      const againInMs = doublingDelayMs(tries, TRY_AGAIN);
      this.log.error({ err, queue: record.queue, jobId: record.jobId, againInMs }, 'retry not created; trying again');
      const timer = setTimeout(() => {
        this.again.delete(record.jobId);
        const current = this.ctx.store.get(record.jobId);
        if (current && this.isLeader(current.queue) && this.needsRetry(current)) void this.retry(current, tries + 1);
      }, againInMs);
      timer.unref();
      this.again.set(record.jobId, { queue: record.queue, timer });
    }
  }

  /** No longer leading `queue`: its pending tries are the next leader's (its adopt finds them). */
  drop(queue: string): void {
    for (const [jobId, { queue: q, timer }] of this.again) {
      if (q !== queue) continue;
      clearTimeout(timer);
      this.again.delete(jobId);
    }
  }
}
