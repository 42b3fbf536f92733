/**
 * Eviction of finished jobs (every node: each folds every partition and keeps its own copy).
 * A job that has finished for good leaves memory `retentionMs` after its last event; its compact
 * entry stays in the store (job-store.ts `evict`), so its id stays taken and its body can be
 * read back from the log. Local memory only: nothing is appended.
 *
 * Jobs are noted as they finish, in a queue ordered by when (roughly: the log's order), and a
 * periodic sweep takes the due ones from its head: no walk over every job, nothing per commit
 * beyond one push when a job finishes.
 */
import { isLiveStatus, type JobStatus } from '../../machines/index.js';
import type { CommandContext } from '../commands/handle-command.js';
import { jobSetOf } from '../commands/jobset-commands.js';
import type { Logger } from '../logger.js';
import type { JobChange, JobRecord } from '../store/job-store.js';
import { Pacer } from '../pacer.js';
import { getsRetry, successorId } from './retrier.js';

/** @defaultValue one hour */
export const DEFAULT_FINISHED_RETENTION_MS = 60 * 60 * 1000;

export type EvictionDecision =
  /** Its body may go; `outcome`: what a `depends_on` naming it comes to (its retry chain's end). */
  | { readonly kind: 'evict'; readonly outcome: JobStatus }
  /** Not yet: its retry is still to come, or the job that followed it is still in memory. */
  | { readonly kind: 'later' }
  /** It stays while it is what it is (a job set's view holds it; a later change brings it back). */
  | { readonly kind: 'keep' };

/**
 * Whether a finished job's body may leave memory now. Succeeded, cancelled, skipped, ignored and
 * removed jobs may; a failed job once it gets no retry, or once the job that followed it (its
 * retry, or a newer job of its key) was evicted, so its chain's outcome is known. A keyed job of
 * a job set's queue stays until it is removed: the job set's views are its jobs in memory
 * (keep_completed decides whether a succeeded one is removed at once).
 */
export function evictionOf(ctx: Pick<CommandContext, 'store' | 'keys' | 'aggregates'>, record: JobRecord): EvictionDecision {
  const status = record.state.job.value;
  if (status === 'new' || isLiveStatus(status)) return { kind: 'keep' };
  if (status !== 'removed' && record.state.job.context.key !== null && jobSetOf(ctx, record.queue) !== undefined) return { kind: 'keep' };
  if (status !== 'failed') return { kind: 'evict', outcome: status };
  const next = successorId(ctx, record);
  if (next === undefined) return getsRetry(record) ? { kind: 'later' } : { kind: 'evict', outcome: 'failed' };
  const followed = ctx.store.evicted(next);
  return followed === undefined ? { kind: 'later' } : { kind: 'evict', outcome: followed.outcome };
}

/** When the job's last event happened (ms): retention counts from there. */
function lastEventMs(record: JobRecord): number {
  const last = record.later[record.later.length - 1];
  return Date.parse(last?.time ?? record.state.job.context.created_at);
}

export type SweepListener = (evicted: number) => void;

export class Evictor {
  // The finished jobs not evicted yet, oldest first: ids and when each is due, from `head` on.
  private ids: string[] = [];
  private dueAt: number[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;
  private ctx: Pick<CommandContext, 'store' | 'keys' | 'aggregates' | 'clock'> | undefined;
  private readonly listeners: SweepListener[] = [];
  private sweeping = false;

  constructor(
    readonly retentionMs: number,
    private readonly log: Logger,
  ) {}

  /** Notes jobs as they finish (a store change listener: one push per finished job). */
  readonly apply = (change: JobChange): void => {
    const after = change.after.state.job.value;
    if (after === 'new' || isLiveStatus(after) || change.before?.state.job.value === after) return;
    const at = change.recorded === undefined ? lastEventMs(change.after) : Date.parse(change.recorded.event.time);
    this.note(change.after.jobId, (Number.isFinite(at) ? at : 0) + this.retentionMs);
  };

  /** A job read back from the log for a command on it: it goes again a retention from now. */
  readonly reinstated = (record: JobRecord): void => {
    this.note(record.jobId, (this.ctx?.clock.now() ?? 0) + this.retentionMs);
  };

  private note(jobId: string, due: number): void {
    this.ids.push(jobId);
    this.dueAt.push(due);
  }

  /** Starts sweeping every `everyMs` (real time; due times are read on the node's clock). */
  start(ctx: Pick<CommandContext, 'store' | 'keys' | 'aggregates' | 'clock'>, everyMs: number = sweepEveryMs(this.retentionMs)): void {
    this.ctx = ctx;
    this.timer = setInterval(() => void this.sweep(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Called after each sweep with how many jobs it evicted. */
  onSweep(listener: SweepListener): void {
    this.listeners.push(listener);
  }

  /** Finished jobs waiting for their retention to pass. */
  get pending(): number {
    return this.ids.length - this.head;
  }

  /** Evicts every due job; resolves with how many were evicted. */
  async sweep(): Promise<number> {
    const ctx = this.ctx;
    if (ctx === undefined || this.sweeping) return 0;
    this.sweeping = true;
    let evicted = 0;
    try {
      const now = ctx.clock.now();
      const again: string[] = [];
      // A busy node has thousands of jobs a second to evict: paced, so a sweep does not hold the loop.
      const pacer = new Pacer();
      while (this.head < this.ids.length && this.dueAt[this.head]! <= now) {
        if (pacer.due()) await pacer.pause();
        const jobId = this.ids[this.head]!;
        this.head += 1;
        const record = ctx.store.get(jobId);
        if (record === undefined) continue;
        const decision = evictionOf(ctx, record);
        if (decision.kind === 'later') again.push(jobId);
        if (decision.kind !== 'evict') continue;
        ctx.store.evict(jobId, decision.outcome);
        evicted += 1;
      }
      // Looked at again a retention later (its retry or follower ends first).
      for (const jobId of again) this.note(jobId, now + this.retentionMs);
      this.compact();
      if (evicted > 0) this.log.debug({ evicted, pending: this.pending }, 'finished jobs evicted');
    } finally {
      this.sweeping = false;
    }
    for (const listener of this.listeners) listener(evicted);
    return evicted;
  }

  /** Drops the taken head once it is most of the arrays. */
  private compact(): void {
    if (this.head < 1_024 || this.head * 2 < this.ids.length) return;
    this.ids = this.ids.slice(this.head);
    this.dueAt = this.dueAt.slice(this.head);
    this.head = 0;
  }
}

/** How often a node sweeps: often enough that a job outstays its retention by a fraction of it, at most a minute. */
export function sweepEveryMs(retentionMs: number): number {
  return Math.min(60_000, Math.max(20, Math.floor(retentionMs / 4)));
}
