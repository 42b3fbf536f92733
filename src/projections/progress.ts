/**
 * Progress: per queue, the count of jobs in each state, and DataJoint's view of the same counts
 * (pending, reserved, success, error, ignore, total) with docket's `cancelled` beside it. The
 * `delayed` count depends on the clock, not only on the log: the query adds it from the queue
 * order when it answers.
 */
import { JOB_STATUSES, type JobStatus } from '../../machines/index.js';
import type { JobChange } from '../store/job-store.js';

/** Counts of the statuses in the views: a removed job (`job.removed`) is counted nowhere. */
export type StatusCounts = Record<Exclude<JobStatus, 'new' | 'removed'>, number>;

/** Whether a status is counted: `new` is not yet a job, `removed` has left the views. */
function counted(status: JobStatus | undefined): status is keyof StatusCounts {
  return status !== undefined && status !== 'new' && status !== 'removed';
}

export interface QueueProgress {
  readonly queue: string;
  readonly counts: StatusCounts;
  /**
   * DataJoint: pending = waiting + queued, reserved = running, success, error = failed, ignore =
   * ignored + skipped. Cancelled jobs are counted apart (`cancelled`): DataJoint has no such state.
   */
  readonly pending: number;
  /**
   * Of the queued jobs, those whose run_at had not come by the answering node's clock (also in
   * `pending` and `counts.queued`). Present in `docket.cmd.progress` replies; a fold of the log
   * alone (replay, audit) has no clock to say it.
   */
  readonly delayed?: number;
  readonly reserved: number;
  readonly success: number;
  readonly error: number;
  readonly ignore: number;
  readonly cancelled: number;
  readonly total: number;
  /** Flow control, in `docket.cmd.progress` replies: paused or active, what holds the queue, held ready jobs by reason. */
  readonly flow?: Record<string, unknown>;
  /**
   * Jobs removed from the views (`job.removed`: cleaned, or dropped by a job set): in no count
   * and not in `total`. Present when there are any, so a queue whose jobs were all removed is
   * told apart from one never used.
   */
  readonly removed?: number;
}

function emptyCounts(): StatusCounts {
  return Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as StatusCounts;
}

export class Progress {
  private readonly byQueue = new Map<string, StatusCounts>();
  private readonly removedByQueue = new Map<string, number>();

  readonly apply = (change: JobChange): void => {
    this.count(change.after.queue, change.before?.state.job.value, change.after.state.job.value);
  };

  private count(queue: string, before: JobStatus | undefined, after: JobStatus, n = 1): void {
    let counts = this.byQueue.get(queue);
    if (!counts) {
      counts = emptyCounts();
      this.byQueue.set(queue, counts);
    }
    if (before === after) return;
    if (counted(before)) counts[before] -= n;
    if (counted(after)) counts[after] += n;
    if (after === 'removed') this.removedByQueue.set(queue, (this.removedByQueue.get(queue) ?? 0) + n);
  }

  /** `n` jobs restored from a checkpoint that no change is heard for (evicted or cold): they count as they did. */
  countRestored(queue: string, status: JobStatus, n = 1): void {
    this.count(queue, undefined, status, n);
  }

  /** The queue's counts; `delayed`, when given, goes in after `pending`. */
  of(queue: string, delayed?: number): QueueProgress {
    const counts = { ...(this.byQueue.get(queue) ?? emptyCounts()) };
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const removed = this.removedByQueue.get(queue) ?? 0;
    return {
      queue,
      counts,
      pending: counts.waiting + counts.queued,
      ...(delayed === undefined ? {} : { delayed }),
      reserved: counts.running,
      success: counts.succeeded,
      error: counts.failed,
      ignore: counts.ignored + counts.skipped,
      cancelled: counts.cancelled,
      total,
      ...(removed === 0 ? {} : { removed }),
    };
  }

  /** Every queue seen, by name; `delayedOf` gives each one's `delayed` count. */
  all(delayedOf?: (queue: string) => number): QueueProgress[] {
    return [...this.byQueue.keys()].sort().map((queue) => this.of(queue, delayedOf?.(queue)));
  }
}
