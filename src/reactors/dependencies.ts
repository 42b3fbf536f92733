/**
 * Dependencies (issue 15, leader only): a job submitted with `depends_on` waits (`waiting`) until
 * every job it names has succeeded, then its queue's leader appends `job.released`; when one of
 * them ends otherwise (failed for good, cancelled, skipped, ignored, removed) it appends
 * `job.skipped` naming it. A retry chain's last attempt decides: a failed dependency that gets an
 * automatic retry is followed to its retry. Every node folds every partition, so the leader of the
 * dependent's queue sees its dependencies in any queue; cycles cannot form, since a job can only
 * name jobs that exist when it is submitted.
 */
import { isLiveStatus } from '../../machines/index.js';
import { envelope, transitionJob, type CommandContext } from '../commands/handle-command.js';
import { DocketError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { JobChange, JobRecord } from '../store/job-store.js';
import { getsRetry, successorId } from './retrier.js';

export type DependencyOutcome =
  | { readonly kind: 'succeeded' }
  /** Not ended yet; `watch` is the job of the chain to watch (the dependency or its latest retry). */
  | { readonly kind: 'pending'; readonly watch: string }
  | { readonly kind: 'ended'; readonly jobId: string; readonly status: string };

/** Where a dependency's retry chain stands (undefined: the job is unknown here). */
export function dependencyOutcome(ctx: Pick<CommandContext, 'store' | 'keys'>, dependencyId: string): DependencyOutcome | undefined {
  let record = ctx.store.get(dependencyId);
  if (!record) return evictedOutcome(ctx, dependencyId);
  for (let hops = 0; hops < 10_000; hops++) {
    const status = record.state.job.value;
    if (status === 'succeeded') return { kind: 'succeeded' };
    if (isLiveStatus(status)) return { kind: 'pending', watch: record.jobId };
    if (status === 'failed') {
      const nextId = successorId(ctx, record);
      const next = nextId === undefined ? undefined : ctx.store.get(nextId);
      if (next) {
        record = next;
        continue;
      }
      if (nextId !== undefined) return evictedOutcome(ctx, nextId);
      if (getsRetry(record)) return { kind: 'pending', watch: record.jobId };
    }
    return { kind: 'ended', jobId: record.jobId, status };
  }
  return { kind: 'pending', watch: record.jobId };
}

/** An evicted job's chain ended when it was evicted: its entry keeps what it came to. */
function evictedOutcome(ctx: Pick<CommandContext, 'store'>, jobId: string): DependencyOutcome | undefined {
  const entry = ctx.store.evicted(jobId);
  if (entry === undefined) return undefined;
  return entry.outcome === 'succeeded' ? { kind: 'succeeded' } : { kind: 'ended', jobId, status: entry.outcome };
}

export class DependencyReleaser {
  /** Job id of a dependency (or the job of its chain now watched) -> waiting jobs that name it. */
  private readonly dependents = new Map<string, Set<string>>();
  /** The reverse: waiting job -> what it is watched under. */
  private readonly watching = new Map<string, Set<string>>();
  private readonly deciding = new Set<string>();

  constructor(
    private readonly ctx: CommandContext,
    private readonly isLeader: (queue: string) => boolean,
    private readonly log: Logger,
  ) {}

  readonly apply = (change: JobChange): void => {
    const { after } = change;
    // A dependent that left `waiting` (released, skipped, cancelled) is watched no more.
    if (change.before?.state.job.value === 'waiting' && after.state.job.value !== 'waiting') this.unwatch(after.jobId);
    // A waiting job with dependencies: watch them (every node keeps the index, so a new leader is warm).
    if (after.state.job.value === 'waiting' && after.state.job.context.depends_on !== null && change.before === undefined) this.evaluate(after);
    // The dependency changed, or a retry of it appeared (the chain goes on there): look at its dependents again.
    const retryOf = change.before === undefined ? after.state.job.context.retry_of : null;
    for (const changed of retryOf === null ? [after.jobId] : [after.jobId, retryOf]) {
      const waiting = this.dependents.get(changed);
      if (waiting === undefined) continue;
      for (const jobId of [...waiting]) {
        const dependent = this.ctx.store.get(jobId);
        if (dependent) this.evaluate(dependent);
      }
    }
  };

  /** Leading `queue` from now: decide every waiting job whose dependencies ended meanwhile. */
  adopt(queue: string, records: Iterable<JobRecord>): void {
    for (const record of records) if (record.queue === queue && record.state.job.value === 'waiting' && record.state.job.context.depends_on !== null) this.evaluate(record);
  }

  private watch(dependencyId: string, jobId: string): void {
    let set = this.dependents.get(dependencyId);
    if (!set) this.dependents.set(dependencyId, (set = new Set()));
    set.add(jobId);
    let watched = this.watching.get(jobId);
    if (!watched) this.watching.set(jobId, (watched = new Set()));
    watched.add(dependencyId);
  }

  private unwatch(jobId: string): void {
    const watched = this.watching.get(jobId);
    this.watching.delete(jobId);
    for (const dependencyId of watched ?? []) {
      const set = this.dependents.get(dependencyId);
      if (!set?.delete(jobId)) continue;
      if (set.size === 0) this.dependents.delete(dependencyId);
    }
  }

  private evaluate(record: JobRecord): void {
    const dependsOn = record.state.job.context.depends_on ?? [];
    if (record.state.job.value !== 'waiting') {
      this.unwatch(record.jobId);
      return;
    }
    let pending = false;
    for (const dependencyId of dependsOn) {
      const outcome = dependencyOutcome(this.ctx, dependencyId);
      if (outcome === undefined || outcome.kind === 'pending') {
        pending = true;
        this.watch(outcome?.watch ?? dependencyId, record.jobId);
        if (outcome && outcome.watch !== dependencyId) this.watch(dependencyId, record.jobId);
        continue;
      }
      if (outcome.kind === 'ended') {
        void this.decide(record, 'skip', `dependency ${outcome.jobId} ${outcome.status}`);
        return;
      }
    }
    if (!pending) void this.decide(record, 'release', null);
  }

  private async decide(record: JobRecord, action: 'release' | 'skip', reason: string | null): Promise<void> {
    if (!this.isLeader(record.queue) || this.deciding.has(record.jobId)) return;
    this.deciding.add(record.jobId);
    try {
      // A derived command id: a decision appended twice (a new leader, a resend) is one event.
      await transitionJob(this.ctx, record.jobId, `dependencies:${action}`, (current, eventId) =>
        action === 'release'
          ? envelope(this.ctx, 'job.released', { queue: current.queue, jobId: current.jobId }, eventId, {})
          : envelope(this.ctx, 'job.skipped', { queue: current.queue, jobId: current.jobId }, eventId, { run_id: null, reason }),
      );
      this.log.info({ queue: record.queue, job_id: record.jobId, action, reason }, action === 'release' ? 'dependencies succeeded; job released' : 'a dependency ended otherwise; job skipped');
    } catch (err) {
      // Cancelled meanwhile (the machine refused), or the queue changed hands: the next leader adopts it.
      if (!(err instanceof DocketError)) this.log.error({ err, queue: record.queue, job_id: record.jobId }, 'deciding on dependencies failed');
    } finally {
      this.deciding.delete(record.jobId);
    }
  }
}
