/**
 * Progress: per queue, the count of jobs in each state, and DataJoint's view of the same counts
 * (pending, reserved, success, error, ignore, total).
 */
import { JOB_STATUSES, type JobStatus } from '../../machines/index.js';
import type { JobChange } from '../store/job-store.js';

export type StatusCounts = Record<Exclude<JobStatus, 'new'>, number>;

export interface QueueProgress {
  readonly queue: string;
  readonly counts: StatusCounts;
  /** DataJoint: pending = waiting + queued, reserved = running, success, error = failed, ignore = ignored + skipped + cancelled. */
  readonly pending: number;
  readonly reserved: number;
  readonly success: number;
  readonly error: number;
  readonly ignore: number;
  readonly total: number;
}

function emptyCounts(): StatusCounts {
  return Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as StatusCounts;
}

export class Progress {
  private readonly byQueue = new Map<string, StatusCounts>();

  readonly apply = (change: JobChange): void => {
    let counts = this.byQueue.get(change.after.queue);
    if (!counts) {
      counts = emptyCounts();
      this.byQueue.set(change.after.queue, counts);
    }
    const before = change.before?.state.job.value;
    const after = change.after.state.job.value;
    if (before === after) return;
    if (before !== undefined && before !== 'new') counts[before] -= 1;
    if (after !== 'new') counts[after] += 1;
  };

  of(queue: string): QueueProgress {
    const counts = { ...(this.byQueue.get(queue) ?? emptyCounts()) };
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    return {
      queue,
      counts,
      pending: counts.waiting + counts.queued,
      reserved: counts.running,
      success: counts.succeeded,
      error: counts.failed,
      ignore: counts.ignored + counts.skipped + counts.cancelled,
      total,
    };
  }

  all(): QueueProgress[] {
    return [...this.byQueue.keys()].sort().map((queue) => this.of(queue));
  }
}
