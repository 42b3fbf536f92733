/** Every job of each queue in submit order (stream sequence), for `list` with a cursor. */
import type { JobChange } from '../store/job-store.js';

/** Two parallel arrays rather than an object per job: this index holds every job ever submitted. */
interface QueueJobs {
  readonly seqs: number[];
  readonly jobIds: string[];
}

export class QueueIndex {
  private readonly byQueue = new Map<string, QueueJobs>();

  readonly apply = (change: JobChange): void => {
    if (change.before !== undefined) return;
    let list = this.byQueue.get(change.after.queue);
    if (!list) {
      list = { seqs: [], jobIds: [] };
      this.byQueue.set(change.after.queue, list);
    }
    const seq = change.after.submitSeq;
    // Appends arrive almost always in order; an own ack can overtake the tail by a little.
    let i = list.seqs.length;
    while (i > 0 && list.seqs[i - 1]! > seq) i -= 1;
    if (i === list.seqs.length) {
      list.seqs.push(seq);
      list.jobIds.push(change.after.jobId);
    } else {
      list.seqs.splice(i, 0, seq);
      list.jobIds.splice(i, 0, change.after.jobId);
    }
  };

  /** Jobs of the queue with submit sequence above `afterSeq`, in order. */
  *after(queue: string, afterSeq: number): Generator<{ seq: number; jobId: string }> {
    const list = this.byQueue.get(queue);
    if (!list) return;
    let lo = 0;
    let hi = list.seqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list.seqs[mid]! <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < list.seqs.length; i++) yield { seq: list.seqs[i]!, jobId: list.jobIds[i]! };
  }

  /** Whether any job was ever submitted to the queue. */
  has(queue: string): boolean {
    return this.byQueue.has(queue);
  }

  queues(): string[] {
    return [...this.byQueue.keys()].sort();
  }
}
