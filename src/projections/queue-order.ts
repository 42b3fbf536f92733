/**
 * Queue order: per queue, the queued jobs whose run_at has come, ordered by (priority, position,
 * stream sequence of job.submitted). A total order that depends only on the log; the clock only
 * decides which delayed jobs have joined. Heaps with lazy deletion: an entry is live while its
 * job is still queued with the same order key, so moves and claims cost O(log n).
 */
import type { JobChange, JobRecord } from '../store/job-store.js';
import type { ColdJobs } from '../store/cold-jobs.js';
import { Heap } from './heap.js';

export interface OrderKey {
  readonly priority: number;
  readonly position: number;
  readonly seq: number;
}

interface DelayedEntry {
  readonly jobId: string;
  readonly runAtMs: number;
}

/** A job's position in the order: the moved-to position, else its job.submitted sequence. */
function positionOf(record: JobRecord): number {
  return record.state.job.context.position ?? record.submitSeq;
}

export function orderKeyOf(record: JobRecord): OrderKey {
  return { priority: record.state.job.context.priority, position: positionOf(record), seq: record.submitSeq };
}

function compareKeys(aPriority: number, aPosition: number, aSeq: number, bPriority: number, bPosition: number, bSeq: number): number {
  return aPriority - bPriority || aPosition - bPosition || aSeq - bSeq;
}

/** The one comparison of queue order. */
export function compareOrder(a: OrderKey, b: OrderKey): number {
  return compareKeys(a.priority, a.position, a.seq, b.priority, b.position, b.seq);
}

/** compareOrder of two records, without building their keys (the heap's hot path). */
function compareRecords(a: JobRecord, b: JobRecord): number {
  return compareKeys(a.state.job.context.priority, positionOf(a), a.submitSeq, b.state.job.context.priority, positionOf(b), b.submitSeq);
}

function runAtOf(record: JobRecord): number {
  return Date.parse(record.state.job.context.run_at);
}

class QueueLine {
  /** Records as they were when they became ready: the heap holds no objects of its own. */
  readonly ready = new Heap<JobRecord>((a, b) => compareRecords(a, b) < 0);
  readonly delayed = new Heap<DelayedEntry>((a, b) => a.runAtMs - b.runAtMs < 0);
  /** Jobs popped by the dispatcher whose claim is in flight. */
  readonly taken = new Set<string>();
  /** Queued jobs, ready or delayed. */
  depth = 0;
  /**
   * Jobs whose live entry is in `delayed` (queued, run_at not yet come, not yet promoted): the
   * `delayed` count of progress and the `delayed` filter of list, read at query time. One set
   * entry per delayed job only; a claim pays a `delete` only while the queue has delayed jobs.
   */
  readonly delayedIds = new Set<string>();
  /**
   * The queue's cold rows (cold-jobs.ts), already in queue order: the next one not yet taken and
   * the end. Read beside `ready` as a second, sorted source; an entry is live while its row is
   * cold, or while its materialised job is queued, due, with the row's order key.
   */
  cold: { readonly jobs: ColdJobs; next: number; readonly end: number } | undefined;
}

/** Reads a job's current record: the liveness test of heap entries. */
export type JobLookup = (jobId: string) => JobRecord | undefined;

export class QueueOrder {
  private readonly lines = new Map<string, QueueLine>();
  private readonly wakers = new Set<(queue: string) => void>();

  /**
   * Entries are checked against the job store (`lookup`) rather than kept in a map of their own:
   * an entry is live while its job is queued with the entry's order key. That is one map entry
   * fewer per queued job, and a queue of a million jobs holds a million of them.
   */
  constructor(
    private readonly now: () => number,
    private readonly lookup: JobLookup,
  ) {}

  /** Called when a queue may have a newly ready job (the dispatcher's wake-up). */
  onReady(waker: (queue: string) => void): () => void {
    this.wakers.add(waker);
    return () => this.wakers.delete(waker);
  }

  private line(queue: string): QueueLine {
    let line = this.lines.get(queue);
    if (!line) {
      line = new QueueLine();
      this.lines.set(queue, line);
    }
    return line;
  }

  /** The job's current record while it is queued. */
  private queuedRecord(jobId: string): JobRecord | undefined {
    const record = this.lookup(jobId);
    return record?.state.job.value === 'queued' ? record : undefined;
  }

  /** The job's record while it is queued with this order key; otherwise the entry is dead. */
  private liveRecord(entry: JobRecord): JobRecord | undefined {
    const record = this.queuedRecord(entry.jobId);
    return record && compareRecords(record, entry) === 0 ? record : undefined;
  }

  /** Takes in the cold rows of a checkpoint (their jobs queued and due when it was read). */
  restoreCold(jobs: ColdJobs): void {
    jobs.columns.ranges.forEach(([start, end], q) => {
      const line = this.line(jobs.columns.queues[q]!);
      line.cold = { jobs, next: start, end };
      for (let row = start; row < end; row++) if (jobs.isKnownByRow(row)) line.depth += 1;
    });
  }

  /** Whether a cold row's entry is live (its job id given). */
  private liveCold(jobs: ColdJobs, row: number, jobId: string): boolean {
    if (jobs.isCold(row)) return true;
    if (!jobs.isKnownByRow(row)) return false;
    const record = this.queuedRecord(jobId);
    const c = jobs.columns;
    return record !== undefined && compareKeys(record.state.job.context.priority, positionOf(record), record.submitSeq, c.priority[row]!, c.position[row]!, c.submitSeq[row]!) === 0 && runAtOf(record) <= this.now();
  }

  /** Whether the queue's next cold row comes before the heap's head. */
  private coldFirst(line: QueueLine, head: JobRecord | undefined): boolean {
    const cold = line.cold;
    if (cold === undefined || cold.next >= cold.end) return false;
    if (head === undefined) return true;
    const c = cold.jobs.columns;
    const row = cold.next;
    return compareKeys(c.priority[row]!, c.position[row]!, c.submitSeq[row]!, head.state.job.context.priority, positionOf(head), head.submitSeq) < 0;
  }

  readonly apply = (change: JobChange): void => {
    const { before, after } = change;
    const line = this.line(after.queue);
    const wasQueued = before?.state.job.value === 'queued';
    if (after.state.job.value !== 'queued') {
      if (wasQueued) line.depth -= 1;
      line.taken.delete(after.jobId);
      if (line.delayedIds.size > 0) line.delayedIds.delete(after.jobId);
      return;
    }
    if (!wasQueued) line.depth += 1;
    const sameRunAt = wasQueued && before.state.job.context.run_at === after.state.job.context.run_at;
    if (sameRunAt && compareRecords(before, after) === 0) return;
    const runAtMs = runAtOf(after);
    if (runAtMs <= this.now()) {
      line.ready.push(after);
      if (line.delayedIds.size > 0) line.delayedIds.delete(after.jobId);
    }
    // A delayed job's entry holds only its run_at: a move keeps it, and the ready entry is made
    // from the record when it comes due.
    else if (!sameRunAt) {
      line.delayed.push({ jobId: after.jobId, runAtMs });
      line.delayedIds.add(after.jobId);
    }
    // A parked claim's timer must also learn of an earlier run_at.
    for (const wake of this.wakers) wake(after.queue);
  };

  /** A delayed entry is live while its job is queued with that run_at and not yet due-and-moved. */
  private liveDelayed(entry: DelayedEntry): JobRecord | undefined {
    const record = this.queuedRecord(entry.jobId);
    return record && runAtOf(record) === entry.runAtMs ? record : undefined;
  }

  /** Moves delayed jobs whose run_at has come into the ready heap. Returns how many joined. */
  promoteDue(queue: string): number {
    const line = this.lines.get(queue);
    if (!line) return 0;
    const now = this.now();
    let joined = 0;
    for (let head = line.delayed.peek(); head && head.runAtMs <= now; head = line.delayed.peek()) {
      line.delayed.pop();
      const record = this.liveDelayed(head);
      if (!record) continue;
      line.ready.push(record);
      line.delayedIds.delete(record.jobId);
      joined += 1;
    }
    return joined;
  }

  /** The earliest run_at among delayed jobs of the queue, for a timer. */
  nextDueAt(queue: string): number | undefined {
    const line = this.lines.get(queue);
    if (!line) return undefined;
    for (let head = line.delayed.peek(); head; head = line.delayed.peek()) {
      if (this.liveDelayed(head)) return head.runAtMs;
      line.delayed.pop();
    }
    return undefined;
  }

  /**
   * Removes and returns the head of the queue for a claim in flight; `release` puts it back if
   * the claim is not appended. A taken job is skipped until its state changes.
   */
  take(queue: string): string | undefined {
    const line = this.lines.get(queue);
    if (!line) return undefined;
    this.promoteDue(queue);
    for (;;) {
      const head = line.ready.peek();
      if (this.coldFirst(line, head)) {
        const cold = line.cold!;
        const row = cold.next++;
        const jobId = cold.jobs.jobIdAt(row);
        if (line.taken.has(jobId) || !this.liveCold(cold.jobs, row, jobId)) continue;
        line.taken.add(jobId);
        return jobId;
      }
      if (head === undefined) return undefined;
      line.ready.pop();
      if (line.taken.has(head.jobId) || !this.liveRecord(head)) continue;
      line.taken.add(head.jobId);
      return head.jobId;
    }
  }

  /**
   * Marks a job not yet folded (its submit is in the writer) as taken by a claim decided in the
   * same commit (the dispatcher's hand-off): the entry its submit makes when folded is skipped,
   * and its claim, folded next, ends it. `release` forgets it if that commit is refused.
   */
  takeSubmitted(queue: string, jobId: string): void {
    this.line(queue).taken.add(jobId);
  }

  /**
   * Returns a taken job whose claim did not land to its place in the order; a job the machine
   * found not yet due (the clock moved back) waits among the delayed again.
   */
  release(queue: string, jobId: string): void {
    const line = this.lines.get(queue);
    if (!line || !line.taken.delete(jobId)) return;
    const record = this.queuedRecord(jobId);
    if (!record) return;
    const runAtMs = runAtOf(record);
    if (runAtMs > this.now()) {
      line.delayed.push({ jobId, runAtMs });
      line.delayedIds.add(jobId);
    } else line.ready.push(record);
  }

  /**
   * Queued jobs of the queue whose run_at has not come by the clock now (part of `depth`).
   * Promotes the due ones first, as a claim would: that changes no order, only where a ready job
   * waits. O(1) when nothing came due.
   */
  delayedCount(queue: string): number {
    const line = this.lines.get(queue);
    if (!line) return 0;
    this.promoteDue(queue);
    return line.delayedIds.size;
  }

  /** Whether the job is queued with its run_at not yet come (what `delayedCount` counts). */
  isDelayed(queue: string, jobId: string): boolean {
    const line = this.lines.get(queue);
    if (!line) return false;
    this.promoteDue(queue);
    return line.delayedIds.has(jobId);
  }

  /** Ready jobs in order (a pure function of the log and the clock), then delayed by run_at. */
  snapshot(queue: string): { ready: string[]; delayed: { jobId: string; runAtMs: number }[] } {
    const line = this.lines.get(queue);
    if (!line) return { ready: [], delayed: [] };
    const now = this.now();
    const seen = new Set<string>();
    const ready: (OrderKey & { jobId: string })[] = [];
    const delayed: { jobId: string; runAtMs: number }[] = [];
    // Every queued job has a live entry in one heap or the other, or is taken for a claim in
    // flight: collect them once each and order them from their records.
    for (const entry of [...line.ready.toArray(), ...line.delayed.toArray(), ...[...line.taken].map((jobId) => ({ jobId }))]) {
      if (seen.has(entry.jobId)) continue;
      const record = this.queuedRecord(entry.jobId);
      if (!record) continue;
      seen.add(entry.jobId);
      const runAtMs = runAtOf(record);
      if (runAtMs <= now) ready.push({ jobId: entry.jobId, ...orderKeyOf(record) });
      else delayed.push({ jobId: entry.jobId, runAtMs });
    }
    // Cold rows are read from their columns: a snapshot does not make a million objects.
    const cold = line.cold;
    if (cold !== undefined) {
      const c = cold.jobs.columns;
      for (let row = cold.next; row < cold.end; row++) {
        if (!cold.jobs.isKnownByRow(row)) continue;
        const jobId = cold.jobs.jobIdAt(row);
        if (seen.has(jobId)) continue;
        if (cold.jobs.isCold(row)) {
          seen.add(jobId);
          ready.push({ jobId, priority: c.priority[row]!, position: c.position[row]!, seq: c.submitSeq[row]! });
          continue;
        }
        const record = this.queuedRecord(jobId);
        if (!record) continue;
        seen.add(jobId);
        const runAtMs = runAtOf(record);
        if (runAtMs <= now) ready.push({ jobId, ...orderKeyOf(record) });
        else delayed.push({ jobId, runAtMs });
      }
    }
    ready.sort(compareOrder);
    delayed.sort((a, b) => a.runAtMs - b.runAtMs || (a.jobId < b.jobId ? -1 : 1));
    return { ready: ready.map((e) => e.jobId), delayed };
  }

  /** Number of queued jobs (ready or delayed). */
  depth(queue: string): number {
    return this.lines.get(queue)?.depth ?? 0;
  }

  queues(): string[] {
    return [...this.lines.keys()];
  }
}
