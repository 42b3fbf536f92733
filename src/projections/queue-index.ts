/** Every job of each queue in submit order (stream sequence), for `list` with a cursor. */
import type { Eviction, JobChange } from '../store/job-store.js';
import type { ColdJobs } from '../store/cold-jobs.js';

/**
 * Two parallel arrays rather than an object per job: this index holds every job ever submitted
 * and not removed. A removed job (`job.removed`) leaves a hole (an empty id) that readers skip;
 * the arrays are compacted once holes are half of them, so removing many jobs stays O(1) each
 * on average rather than a splice of the whole array per job.
 */
interface QueueJobs {
  seqs: number[];
  jobIds: string[];
  holes: number;
}

/** Holes are compacted away once they are this share of a queue's entries (and at least `MIN_HOLES`). */
const COMPACT_RATIO = 0.5;
const MIN_HOLES = 1_024;

export class QueueIndex {
  private readonly byQueue = new Map<string, QueueJobs>();
  /**
   * Per queue, the cold rows of a checkpoint (cold-jobs.ts) not yet merged into its list: merged
   * the first time the list is read or changes by a removal, so a restart decodes no job id.
   */
  private readonly coldByQueue = new Map<string, { jobs: ColdJobs; start: number; end: number }>();

  /** Takes in the cold rows of a checkpoint: jobs of their queues, in the list from now on. */
  restoreCold(jobs: ColdJobs): void {
    jobs.columns.ranges.forEach(([start, end], q) => {
      const queue = jobs.columns.queues[q]!;
      this.know(queue);
      this.coldByQueue.set(queue, { jobs, start, end });
    });
  }

  /** Merges the queue's cold rows, if any, into its list (by submit sequence). */
  private warm(queue: string): void {
    const cold = this.coldByQueue.get(queue);
    if (cold === undefined) return;
    this.coldByQueue.delete(queue);
    const { jobs, start, end } = cold;
    const seqOf = jobs.columns.submitSeq;
    const rows: number[] = [];
    for (let row = start; row < end; row++) if (jobs.isKnownByRow(row)) rows.push(row);
    // In queue order: the same as submit order unless priorities or moves differ.
    rows.sort((a, b) => seqOf[a]! - seqOf[b]!);
    const list = this.byQueue.get(queue)!;
    const seqs: number[] = [];
    const jobIds: string[] = [];
    let i = 0;
    for (const row of rows) {
      const seq = seqOf[row]!;
      for (; i < list.seqs.length && list.seqs[i]! < seq; i++) {
        seqs.push(list.seqs[i]!);
        jobIds.push(list.jobIds[i]!);
      }
      seqs.push(seq);
      jobIds.push(jobs.jobIdAt(row));
    }
    for (; i < list.seqs.length; i++) {
      seqs.push(list.seqs[i]!);
      jobIds.push(list.jobIds[i]!);
    }
    list.seqs = seqs;
    list.jobIds = jobIds;
  }

  readonly apply = (change: JobChange): void => {
    if (change.after.state.job.value === 'removed') {
      if (change.before !== undefined && change.before.state.job.value !== 'removed') this.remove(change.after.queue, change.after.jobId, change.after.submitSeq);
      return;
    }
    if (change.before !== undefined) return;
    let list = this.byQueue.get(change.after.queue);
    if (!list) {
      list = { seqs: [], jobIds: [], holes: 0 };
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

  /** A finished job whose body left memory (job-store.ts `evict`) leaves `list` as a removed one does; `get` still finds it. */
  readonly evict = (eviction: Eviction): void => {
    if (eviction.record.state.job.value !== 'removed') this.remove(eviction.record.queue, eviction.record.jobId, eviction.record.submitSeq);
  };

  /** A queue whose jobs were all evicted before a restart stays known (its jobs are in the log, and in `progress`). */
  know(queue: string): void {
    if (!this.byQueue.has(queue)) this.byQueue.set(queue, { seqs: [], jobIds: [], holes: 0 });
  }

  /** The first index whose submit sequence is above `afterSeq`. */
  private static firstAfter(list: QueueJobs, afterSeq: number): number {
    let lo = 0;
    let hi = list.seqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list.seqs[mid]! <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private remove(queue: string, jobId: string, submitSeq: number): void {
    this.warm(queue);
    const list = this.byQueue.get(queue);
    if (!list) return;
    const i = QueueIndex.firstAfter(list, submitSeq - 1);
    if (list.seqs[i] !== submitSeq || list.jobIds[i] !== jobId) return;
    list.jobIds[i] = '';
    list.holes += 1;
    if (list.holes >= MIN_HOLES && list.holes >= list.seqs.length * COMPACT_RATIO) {
      const seqs: number[] = [];
      const jobIds: string[] = [];
      for (let k = 0; k < list.seqs.length; k++) {
        if (list.jobIds[k] === '') continue;
        seqs.push(list.seqs[k]!);
        jobIds.push(list.jobIds[k]!);
      }
      list.seqs = seqs;
      list.jobIds = jobIds;
      list.holes = 0;
    }
  }

  /** Jobs of the queue with submit sequence above `afterSeq`, in order (removed jobs left out). */
  *after(queue: string, afterSeq: number): Generator<{ seq: number; jobId: string }> {
    this.warm(queue);
    const list = this.byQueue.get(queue);
    if (!list) return;
    for (let i = QueueIndex.firstAfter(list, afterSeq); i < list.seqs.length; i++) {
      const jobId = list.jobIds[i]!;
      if (jobId !== '') yield { seq: list.seqs[i]!, jobId };
    }
  }

  /** Whether any job was ever submitted to the queue. */
  has(queue: string): boolean {
    return this.byQueue.has(queue);
  }

  queues(): string[] {
    return [...this.byQueue.keys()].sort();
  }
}
