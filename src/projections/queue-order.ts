/**
 * Queue order: per queue, the queued jobs whose run_at has come, ordered by (priority, position,
 * stream sequence of job.submitted). A total order that depends only on the log; the clock only
 * decides which delayed jobs have joined. Heaps with lazy deletion: an entry is live while its
 * job is still queued with the same order key, so moves and claims cost O(log n).
 */
import type { JobChange, JobRecord } from '../store/job-store.js';
import { Heap } from './heap.js';

export interface OrderKey {
  readonly priority: number;
  readonly position: number;
  readonly seq: number;
}

interface ReadyEntry extends OrderKey {
  readonly jobId: string;
}
interface DelayedEntry {
  readonly jobId: string;
  readonly runAtMs: number;
}

export function orderKeyOf(record: JobRecord): OrderKey {
  const ctx = record.state.job.context;
  return { priority: ctx.priority, position: ctx.position ?? record.submitSeq, seq: record.submitSeq };
}

/** The one comparison of queue order. */
export function compareOrder(a: OrderKey, b: OrderKey): number {
  return a.priority - b.priority || a.position - b.position || a.seq - b.seq;
}

class QueueLine {
  readonly ready = new Heap<ReadyEntry>((a, b) => compareOrder(a, b) < 0);
  readonly delayed = new Heap<DelayedEntry>((a, b) => a.runAtMs - b.runAtMs < 0);
  /** jobId -> its current entry while queued (the liveness test for lazy deletion). */
  readonly queued = new Map<string, ReadyEntry & { runAtMs: number; inReady: boolean }>();
  /** Jobs popped by the dispatcher whose claim is in flight. */
  readonly taken = new Set<string>();
}

export class QueueOrder {
  private readonly lines = new Map<string, QueueLine>();
  private readonly wakers = new Set<(queue: string) => void>();

  constructor(private readonly now: () => number) {}

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

  readonly apply = (change: JobChange): void => {
    const { after } = change;
    const line = this.line(after.queue);
    const wasQueued = line.queued.has(after.jobId);
    if (after.state.job.value !== 'queued') {
      if (wasQueued) line.queued.delete(after.jobId);
      line.taken.delete(after.jobId);
      return;
    }
    const key = orderKeyOf(after);
    const runAtMs = Date.parse(after.state.job.context.run_at);
    const previous = line.queued.get(after.jobId);
    if (previous && compareOrder(previous, key) === 0 && previous.runAtMs === runAtMs) return;
    const entry = { jobId: after.jobId, ...key, runAtMs, inReady: false };
    line.queued.set(after.jobId, entry);
    if (runAtMs <= this.now()) {
      entry.inReady = true;
      line.ready.push(entry);
      for (const wake of this.wakers) wake(after.queue);
    } else {
      line.delayed.push({ jobId: after.jobId, runAtMs });
      // A parked claim's timer must learn of an earlier run_at.
      for (const wake of this.wakers) wake(after.queue);
    }
  };

  /** Moves delayed jobs whose run_at has come into the ready heap. Returns how many joined. */
  promoteDue(queue: string): number {
    const line = this.lines.get(queue);
    if (!line) return 0;
    const now = this.now();
    let joined = 0;
    for (let head = line.delayed.peek(); head && head.runAtMs <= now; head = line.delayed.peek()) {
      line.delayed.pop();
      const entry = line.queued.get(head.jobId);
      if (!entry || entry.inReady || entry.runAtMs !== head.runAtMs) continue;
      entry.inReady = true;
      line.ready.push(entry);
      joined += 1;
    }
    return joined;
  }

  /** The earliest run_at among delayed jobs of the queue, for a timer. */
  nextDueAt(queue: string): number | undefined {
    const line = this.lines.get(queue);
    if (!line) return undefined;
    for (let head = line.delayed.peek(); head; head = line.delayed.peek()) {
      const entry = line.queued.get(head.jobId);
      if (entry && !entry.inReady && entry.runAtMs === head.runAtMs) return head.runAtMs;
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
    for (let head = line.ready.pop(); head; head = line.ready.pop()) {
      const entry = line.queued.get(head.jobId);
      if (entry !== head || line.taken.has(head.jobId)) continue;
      line.taken.add(head.jobId);
      return head.jobId;
    }
    return undefined;
  }

  /**
   * Returns a taken job whose claim did not land to its place in the order; a job the machine
   * found not yet due (the clock moved back) waits among the delayed again.
   */
  release(queue: string, jobId: string): void {
    const line = this.lines.get(queue);
    if (!line || !line.taken.delete(jobId)) return;
    const entry = line.queued.get(jobId);
    if (!entry || !entry.inReady) return;
    if (entry.runAtMs > this.now()) {
      entry.inReady = false;
      line.delayed.push({ jobId, runAtMs: entry.runAtMs });
    } else {
      line.ready.push(entry);
    }
  }

  /** Ready jobs in order (a pure function of the log and the clock), then delayed by run_at. */
  snapshot(queue: string): { ready: string[]; delayed: { jobId: string; runAtMs: number }[] } {
    const line = this.lines.get(queue);
    if (!line) return { ready: [], delayed: [] };
    const now = this.now();
    const ready: (OrderKey & { jobId: string })[] = [];
    const delayed: { jobId: string; runAtMs: number }[] = [];
    for (const entry of line.queued.values()) {
      if (entry.runAtMs <= now) ready.push(entry);
      else delayed.push({ jobId: entry.jobId, runAtMs: entry.runAtMs });
    }
    ready.sort(compareOrder);
    delayed.sort((a, b) => a.runAtMs - b.runAtMs || (a.jobId < b.jobId ? -1 : 1));
    return { ready: ready.map((e) => e.jobId), delayed };
  }

  /** Number of queued jobs (ready or delayed). */
  depth(queue: string): number {
    return this.lines.get(queue)?.queued.size ?? 0;
  }

  queues(): string[] {
    return [...this.lines.keys()];
  }
}
