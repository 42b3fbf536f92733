/**
 * Claims by request id (leader only): what a claim carrying `request_id` was answered with, so
 * that the same claim sent again gets the same runs back instead of new ones (README "Workers").
 *
 * A claim's reply can be lost after its `job.claimed` is committed: the worker's request timed
 * out while the leader was slow, a forwarding node gave up on the leader first, the connection
 * blinked. Without this, the worker sends a new claim and the jobs of the lost reply sit running
 * with nobody working on them until their leases lapse (30 s by default). A resend is answered
 * with those of the first answer's runs that still hold their jobs, and nothing new is claimed;
 * one that arrives while the first is still being decided waits for its answer.
 *
 * An answer is kept for its claim's lease: a run whose worker never heard of it cannot outlive
 * that (it is never heartbeat), so a later resend could get nothing. Kept answers whose runs have
 * all ended are let go sooner, on the next sweep. Empty answers are not kept: a resend of a claim
 * that took nothing claims afresh, which hands nothing twice.
 */
import type { ClaimCommand, ClaimedJob } from '../commands/schemas.js';
import { JobDefaults } from '../commands/limits.js';

interface Kept {
  readonly queue: string;
  /** The first answer, still being decided or given. */
  readonly answer: Promise<ClaimedJob[]>;
  /** Real time (ms) after which a resend is a new claim; set once answered with jobs. */
  expiresAt: number;
  jobs: readonly ClaimedJob[] | undefined;
}

/** Sweeps run at most this often (ms, real time), from `remember`: no timer to stop. */
const SWEEP_EVERY_MS = 1_000;

export class ClaimReplies {
  private readonly kept = new Map<string, Kept>();
  private lastSweep = 0;

  constructor(
    /** Whether a run still holds its job (or job node) of `queue`: the heartbeat's rule. */
    private readonly holds: (queue: string, runId: string) => boolean,
    private readonly nowMs: () => number = Date.now,
  ) {}

  /**
   * The answer to a claim sent again (its worker and request id seen before, in this queue): the
   * first answer's jobs whose runs still hold them. Undefined for a claim not seen (answer it
   * afresh and `remember` it).
   */
  resent(queue: string, request: ClaimCommand): Promise<ClaimedJob[]> | undefined {
    const key = keyOf(queue, request);
    if (key === undefined) return undefined;
    const kept = this.kept.get(key);
    if (kept === undefined) return undefined;
    if (kept.jobs !== undefined && kept.expiresAt <= this.nowMs()) {
      this.kept.delete(key);
      return undefined;
    }
    return kept.answer.then((jobs) => jobs.filter((job) => this.holds(queue, job.run_id)));
  }

  /** Keeps the answer of a claim with a request id, for a resend of it. */
  remember(queue: string, request: ClaimCommand, answer: Promise<ClaimedJob[]>): void {
    const key = keyOf(queue, request);
    if (key === undefined) return;
    const kept: Kept = { queue, answer, expiresAt: Infinity, jobs: undefined };
    this.kept.set(key, kept);
    const forget = () => {
      if (this.kept.get(key) === kept) this.kept.delete(key);
    };
    answer.then((jobs) => {
      if (jobs.length === 0) return forget();
      kept.jobs = jobs;
      kept.expiresAt = this.nowMs() + (request.lease_ms ?? JobDefaults.leaseMs);
    }, forget);
    this.sweep();
  }

  /** Answers kept (tests). */
  get size(): number {
    return this.kept.size;
  }

  /** Lets go of answers past their lease or whose runs have all ended. */
  private sweep(): void {
    const now = this.nowMs();
    if (now - this.lastSweep < SWEEP_EVERY_MS) return;
    this.lastSweep = now;
    for (const [key, kept] of this.kept) {
      if (kept.jobs === undefined) continue;
      if (kept.expiresAt <= now || !kept.jobs.some((job) => this.holds(kept.queue, job.run_id))) this.kept.delete(key);
    }
  }
}

/** A claim's identity across resends: its queue, worker and request id (none without a request id). */
function keyOf(queue: string, request: ClaimCommand): string | undefined {
  return request.request_id === undefined ? undefined : JSON.stringify([queue, request.worker, request.request_id]);
}
