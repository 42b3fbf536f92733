/**
 * The jobs of held concurrency keys, parked out of the queue order's scan (they stay "taken" in
 * the order, so no claim sees them) until their key may run again. Without it every claim would
 * walk the same held jobs from the head of the queue, and a busy key's long backlog would starve
 * the keys behind it. A key's jobs go back to their places in the order when it is freed: one of
 * its runs ended, a claim of it settled, its rate window moved on, or the settings changed.
 */
import type { QueueOrder } from '../projections/queue-order.js';

export class ParkedKeys {
  private readonly byKey = new Map<string, string[]>();
  /** Keys held by a rate window: when it moves on (ms). */
  private readonly rateUntil = new Map<string, number>();

  constructor(
    private readonly queue: string,
    private readonly order: Pick<QueueOrder, 'release'>,
  ) {}

  /** Parks a taken job of a held key; `untilMs` when a rate window holds it. */
  park(key: string, jobId: string, untilMs: number | undefined): void {
    let jobs = this.byKey.get(key);
    if (!jobs) this.byKey.set(key, (jobs = []));
    jobs.push(jobId);
    if (untilMs !== undefined) this.rateUntil.set(key, Math.min(this.rateUntil.get(key) ?? Infinity, untilMs));
  }

  has(key: string): boolean {
    return this.byKey.has(key);
  }

  /** Puts the key's jobs back in the order (a job that left `queued` meanwhile stays out). */
  free(key: string): void {
    const jobs = this.byKey.get(key);
    if (!jobs) return;
    this.byKey.delete(key);
    this.rateUntil.delete(key);
    for (const jobId of jobs) this.order.release(this.queue, jobId);
  }

  /** Frees the keys whose rate window has moved on by `nowMs`. */
  freeDue(nowMs: number): void {
    for (const [key, until] of this.rateUntil) if (until <= nowMs) this.free(key);
  }

  freeAll(): void {
    for (const key of [...this.byKey.keys()]) this.free(key);
  }

  get size(): number {
    return this.byKey.size;
  }
}
