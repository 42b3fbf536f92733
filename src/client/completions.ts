/**
 * The Worker's completions, batched without waiting on a reply: the runs that end in one turn of
 * the event loop go out at its end as one request, `{runs: [...]}` (the leader decides them into
 * one commit), each answered on its own; a run that ends while no other runs goes out at once. A
 * request in flight does not hold the next back: runs gathered behind it missed the leader's
 * next commit (it leaves when the previous one is acknowledged, before that reply is back), so a
 * worker's slots split between two commits.
 * Each sent request carries a claim for the slots it frees, so the next jobs come back with it:
 * handed to the Worker in the leader's order, before the runs the reply answers are resolved.
 */
import type { Json } from '../../machines/index.js';
import type { ClaimedJob } from '../commands/schemas.js';
import { Limits } from '../commands/limits.js';
import { DocketError, fromErrorBody, type ErrorBody } from '../errors.js';

export type CompletionVerb = 'complete' | 'fail';

/** How one run's end was taken: its job's status, or why not. */
export type CompletionOutcome = { readonly status: string } | { readonly refused: DocketError } | { readonly undelivered: true };

/** A run's end as its completion (`result`) or failure (`error`) carries it: one item of `runs`. */
export interface RunEnd {
  run_id: string;
  job_id: string;
  result?: Json;
  error?: { message: string; stack?: string; retryable: boolean };
  exit_code?: number;
  duration_ms?: number;
}

interface Pending {
  readonly item: RunEnd;
  readonly resolve: (outcome: CompletionOutcome) => void;
  attempts: number;
}

/** Sends a request to the queue's leader; throws the reply's DocketError. */
export type WorkRequest = <T>(verb: CompletionVerb, body: unknown) => Promise<T>;

interface SingleReply {
  readonly status: string;
  readonly jobs?: ClaimedJob[];
}
interface BatchReply {
  readonly runs: ({ ok: true; status: string } | { ok: false; error: ErrorBody })[];
  readonly jobs?: ClaimedJob[];
}

/** Sends of one completion before it is given up (the lease then lapses). */
const MAX_ATTEMPTS = 20;

export class CompletionBatcher {
  private readonly pending: Pending[] = [];
  private scheduled = false;
  /**
   * The next claim of a send whose outcome is unknown (no reply): the resend carries it again, with
   * its request id, so the leader answers with the jobs it may have claimed for the first send
   * rather than claiming more (README "Workers"). A completion is idempotent by run id already.
   */
  private readonly unanswered: Record<string, unknown>[] = [];
  /** Jobs asked for by the next claims of sends in flight. */
  private askedInFlight = 0;

  constructor(
    private readonly verb: CompletionVerb,
    private readonly send: WorkRequest,
    /** The claim fields for `max` freed slots, or undefined when no more jobs are wanted. */
    private readonly nextClaim: (max: number) => Record<string, unknown> | undefined,
    private readonly backoffMs: (attempt: number) => number,
    /**
     * Every job a reply claimed, in the leader's order (queue order), before the runs it answers
     * are resolved: the jobs for the slots the runs freed, those claimed ahead, and the one
     * claimed for a run answered `unavailable` (sent again, while the job claimed for its slot is
     * already ours). Left alone they would wait out their leases.
     */
    private readonly claimed: (jobs: readonly ClaimedJob[]) => void = () => undefined,
    /**
     * Whether another run may still end in this turn. When none can, a run's end goes out as soon
     * as this turn's promise callbacks are done instead of after its I/O callbacks: nothing could
     * join it, and at concurrency 1 those callbacks (replies, live events) held every completion
     * back by ~0.1 ms.
     */
    private readonly othersRunning: () => boolean = () => true,
  ) {}

  /**
   * Jobs the next claims of this batcher's sends in flight ask for. A next claim waiting to be sent
   * again is not counted: it may wait for a later completion for ever (its own runs given up), and
   * while it waits the worker may claim past its room by as much, once, after a failed send.
   */
  get asking(): number {
    return this.askedInFlight;
  }

  /** Reports one run's end (`{run_id, job_id, ...}`); resolves once the leader answered for it. */
  report(item: RunEnd): Promise<CompletionOutcome> {
    return new Promise((resolve) => {
      this.pending.push({ item, resolve, attempts: 0 });
      if (this.scheduled) return;
      this.scheduled = true;
      if (this.othersRunning()) setImmediate(() => this.flush());
      else queueMicrotask(() => this.flush());
    });
  }

  private flush(): void {
    this.scheduled = false;
    while (this.pending.length > 0) void this.deliver(this.pending.splice(0, Limits.MaxClaimJobs));
  }

  private async deliver(batch: Pending[]): Promise<void> {
    const next = this.unanswered.shift() ?? this.nextClaim(batch.length);
    const asked = next === undefined ? 0 : maxOf(next);
    this.askedInFlight += asked;
    let retry: Pending[] = [];
    try {
      if (batch.length === 1) {
        const only = batch[0]!;
        const reply = await this.send<SingleReply>(this.verb, { ...only.item, ...(next ? { next } : {}) }).finally(() => (this.askedInFlight -= asked));
        if (reply.jobs !== undefined && reply.jobs.length > 0) this.claimed(reply.jobs);
        only.resolve({ status: reply.status });
      } else {
        const reply = await this.send<BatchReply>(this.verb, { runs: batch.map((p) => p.item), ...(next ? { next } : {}) }).finally(() => (this.askedInFlight -= asked));
        if (reply.jobs !== undefined && reply.jobs.length > 0) this.claimed(reply.jobs);
        batch.forEach((p, i) => {
          const answer = reply.runs[i];
          if (answer?.ok) p.resolve({ status: answer.status });
          else if (answer && answer.error.code !== 'unavailable') p.resolve({ refused: fromErrorBody(answer.error) });
          else retry.push(p);
        });
      }
    } catch (err) {
      if (err instanceof DocketError && err.code !== 'unavailable') {
        for (const p of batch) p.resolve({ refused: err });
        return;
      }
      retry = batch;
      if (next) this.unanswered.push(next);
    }
    for (const p of retry) {
      p.attempts += 1;
      if (p.attempts >= MAX_ATTEMPTS) p.resolve({ undelivered: true });
    }
    const again = retry.filter((p) => p.attempts < MAX_ATTEMPTS);
    if (again.length === 0) return;
    // Idempotent by run id: a resend of a completion the leader took answers as the first did.
    await new Promise((r) => setTimeout(r, this.backoffMs(again[0]!.attempts)));
    this.pending.unshift(...again);
    this.flush();
  }
}

/** How many jobs a next claim asks for (a claim's `max`, 1 when absent). */
function maxOf(next: Record<string, unknown>): number {
  return typeof next['max'] === 'number' ? next['max'] : 1;
}
