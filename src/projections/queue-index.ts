/** Every job of each queue in submit order (stream sequence), for `list` with a cursor. */
import type { JobChange } from '../store/job-store.js';

export class QueueIndex {
  private readonly byQueue = new Map<string, { seq: number; jobId: string }[]>();

  readonly apply = (change: JobChange): void => {
    if (change.before !== undefined) return;
    let list = this.byQueue.get(change.after.queue);
    if (!list) {
      list = [];
      this.byQueue.set(change.after.queue, list);
    }
    const item = { seq: change.after.submitSeq, jobId: change.after.jobId };
    // Appends arrive almost always in order; an own ack can overtake the tail by a little.
    let i = list.length;
    while (i > 0 && list[i - 1]!.seq > item.seq) i -= 1;
    list.splice(i, 0, item);
  };

  /** Jobs of the queue with submit sequence above `afterSeq`, in order. */
  *after(queue: string, afterSeq: number): Generator<{ seq: number; jobId: string }> {
    const list = this.byQueue.get(queue);
    if (!list) return;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid]!.seq <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < list.length; i++) yield list[i]!;
  }

  queues(): string[] {
    return [...this.byQueue.keys()].sort();
  }
}
