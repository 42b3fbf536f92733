/**
 * The TypeScript Worker: claims jobs of one queue (long poll), runs the handler with up to
 * `concurrency` jobs at once, heartbeats their leases, and completes or fails each run naming its
 * run id. A run that loses its job (lease lapsed, job cancelled) has its AbortSignal fired on the
 * next heartbeat reply; its late completion is refused by the leader (`stale_run`).
 */
import { execFileSync } from 'node:child_process';
import { hostname, userInfo } from 'node:os';
import type { NatsConnection } from '@nats-io/nats-core';
import { Priority, type Json } from '../../machines/index.js';
import type { ClaimedFanOut, ClaimedJob } from '../commands/schemas.js';
import { coerceError, DocketError, InvalidRequestError, NonRetryableJobError } from '../errors.js';
import { JobDefaults, Limits } from '../commands/limits.js';
import { randomIds } from '../ids.js';
import { childLogger, silentLogger, type Logger } from '../logger.js';
import { CompletionBatcher, type CompletionVerb, type RunEnd } from './completions.js';
import { connectNats, replyFields, requestBytes } from '../nats/connection.js';
import { Requester } from '../nats/requester.js';
import { isQueueName, NODE_NAME, subjects, type WorkVerb } from '../nats/subjects.js';
import type { LocalWork } from '../dispatch/work-service.js';

/** Claims a worker keeps open at once. */
const MAX_CLAIMS_IN_FLIGHT = 4;

/**
 * How long an idle worker's completion waits for the next job by default (`nextClaimWaitMs`):
 * long enough for a client that saw the completion to submit again (well under a millisecond
 * here, tens on a loaded machine), short enough that the completion's reply, held meanwhile,
 * says "done" promptly (a run's `finished` log line, `counts`, `close()`).
 */
const NEXT_CLAIM_WAIT_MS = 20;

/**
 * Runs shorter than this on average make a worker claim ahead (`prefetch`): a held job then waits
 * about as long as a completion's commit takes to come back (longer behind a run far above the
 * average), and a worker of longer jobs (where that round trip is a small share of a run) keeps
 * no job another worker could be running.
 */
const PREFETCH_MAX_RUN_MS = 10;
/** The weight of the last run in the mean run time that decides claiming ahead. */
const RUN_MS_WEIGHT = 0.2;

/** A claimed job as the handler receives it (the claim reply's item). */
export type WorkerJob = ClaimedJob;

export interface WorkerJobContext {
  /** The run id: the handle of this run's completion. */
  readonly runId: string;
  /**
   * The position of the run's claim in the log: strictly increasing within the queue. Hand it to
   * a downstream system so it can refuse a write from an older run of the same job.
   */
  readonly fencingToken: number;
  /** Fired when the run no longer holds its job (cancelled, lease lost) or the worker stops hard. */
  readonly signal: AbortSignal;
  /** Extends the lease now (heartbeats are also sent automatically). */
  heartbeat(): Promise<void>;
  /**
   * Reports progress; sent with the next heartbeat and logged by the leader at debug (not stored
   * in the log). At most Limits.MaxProgressBytes of JSON: more throws InvalidRequestError here,
   * since the leader would refuse the heartbeat carrying it (and the run's lease would lapse).
   */
  progress(value: Json): void;
  /** The exit code of the process this run stood for: recorded as `exit_code` on its completion or failure. */
  setExitCode(code: number): void;
  /** The worker's node (WorkerOptions.node). */
  readonly node: string;
  /**
   * Set when the run is a fan-out job's entry for this node (README "Fan-out jobs"): the job's
   * id, this node, all the job's nodes and its quorum. `job.job_id` is then the job node's id.
   */
  readonly fanOut?: ClaimedFanOut;
}

export type WorkerHandler = (job: WorkerJob, ctx: WorkerJobContext) => Promise<Json | void> | Json | void;

export interface WorkerOptions {
  readonly queue: string;
  readonly handler: WorkerHandler;
  /** @defaultValue 'nats://127.0.0.1:4222' */
  readonly servers?: string | string[];
  /** Use this connection; `close()` leaves it open. */
  readonly nc?: NatsConnection;
  /**
   * Run in this node's process (README "Embedded workers"): claims and completions are served by
   * the node itself while it leads the queue, with no NATS round trip, and go over the node's
   * connection otherwise. Takes the place of `servers` and `nc`; close the worker before the node.
   */
  readonly local?: { readonly nc: NatsConnection; readonly work: LocalWork };
  /** Jobs run at once. @defaultValue 1 */
  readonly concurrency?: number;
  /**
   * Jobs claimed ahead, beyond `concurrency`, each held until a run ends: the next job is in hand
   * while the last one's completion is being committed, instead of a round trip later. Claimed
   * ahead by completions (their next claim asks for this room too, and takes only jobs ready
   * then: an idle queue sees no more requests), and only while this worker's runs are short
   * (under 10 ms on average), so a worker of longer jobs holds none that another worker could
   * run; a held job waits longer behind a run far above that average. A held job is claimed (a
   * run, leased and heartbeated like a running one, counted by the queue's concurrency limits)
   * but its handler has not started; at most `concurrency` handlers run at once, and `close()`
   * runs the held jobs before it returns. With `maxJobs` nothing is claimed ahead (completions
   * claim nothing). 0: claim only for free slots. 0..1000. @defaultValue concurrency, at most 1000
   */
  readonly prefetch?: number;
  /** Lease asked for each claim; heartbeats go every third of it. @defaultValue 30000 */
  readonly leaseMs?: number;
  /** How long one claim waits for work. @defaultValue 2000 */
  readonly claimWaitMs?: number;
  /**
   * How long a completion's claim for the next job waits at the queue when this worker has
   * nothing else to do (no other run, no claim out), the completion's reply waiting with it:
   * the next job submitted meanwhile is handed over in its submit's own commit. At most
   * `claimWaitMs`; 0 sends a long-poll claim after the reply instead. @defaultValue 20
   */
  readonly nextClaimWaitMs?: number;
  /** @defaultValue `<host>-<pid>-<random>` */
  readonly workerId?: string;
  /**
   * The worker node this worker runs on: claims take the fan-out jobs' entries of this node
   * (README "Fan-out jobs"), and the queue's leader counts the node as live while its workers
   * claim or heartbeat. 1-128 characters of [A-Za-z0-9_.:-]. @defaultValue the host name (other characters as `-`)
   */
  readonly node?: string;
  /**
   * Code version recorded on each run; `'git'` records the git hash of the working directory's
   * repository (seed 000's `version: "git"`; 'unknown' outside one). @defaultValue 'unknown'
   */
  readonly version?: string;
  /** Claims at most this many jobs in all, then stops claiming (`docket populate --max-calls`). @defaultValue no bound */
  readonly maxJobs?: number;
  /** Only jobs at this priority or more urgent are claimed (`docket populate --priority`). @defaultValue any */
  readonly maxPriority?: number;
  /**
   * Stops claiming once a claim finds nothing (claims do not wait): `idle()` then resolves when the
   * runs in flight have ended (`docket populate`). @defaultValue false
   */
  readonly untilEmpty?: boolean;
  readonly logger?: Logger;
  /** SIGTERM and SIGINT drain the worker (finish in-flight runs) and exit the process. @defaultValue false */
  readonly handleSignals?: boolean;
}

/**
 * One run in flight: the handler's context and what the worker keeps of the run, in one object.
 * An object of closures and getters per run cost ~1.5 KB that lived past V8's young generation
 * at concurrency 100 (it waits out the completion's round trip), so the old space grew into fresh
 * pages. What a handler may destructure (`const { progress, signal } = ctx`) is still a bound
 * function: `heartbeat` is the worker's own, `progress` and `setExitCode` are made on first read.
 */
class Run implements WorkerJobContext {
  declare readonly fanOut?: ClaimedFanOut;
  /** When its handler started (a held job's, once a slot took it). */
  startedAt = Date.now();
  /** Progress reported since the last heartbeat. */
  unsentProgress: Json | undefined = undefined;
  exitCode: number | undefined = undefined;
  /** The handler has returned or thrown; only the completion is still on its way. */
  settled = false;
  /** Made only if the handler reads `signal`: an AbortController costs microseconds per job. */
  private controller: AbortController | undefined = undefined;
  private abortedWith: Error | undefined = undefined;
  private progressFn: ((value: Json) => void) | undefined = undefined;
  private setExitCodeFn: ((code: number) => void) | undefined = undefined;

  constructor(
    readonly job: WorkerJob,
    readonly node: string,
    readonly heartbeat: () => Promise<void>,
  ) {
    if (job.fan_out !== undefined) (this as { fanOut?: ClaimedFanOut }).fanOut = job.fan_out;
  }

  get runId(): string {
    return this.job.run_id;
  }

  get fencingToken(): number {
    return this.job.fencing_token;
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.abortedWith !== undefined) this.controller.abort(this.abortedWith);
    }
    return this.controller.signal;
  }

  get progress(): (value: Json) => void {
    return (this.progressFn ??= (value) => {
      const bytes = Buffer.byteLength(JSON.stringify(value ?? null));
      if (bytes > Limits.MaxProgressBytes) throw new InvalidRequestError(`progress: must be at most ${Limits.MaxProgressBytes} bytes of JSON, got ${bytes}`);
      this.unsentProgress = value;
    });
  }

  get setExitCode(): (code: number) => void {
    return (this.setExitCodeFn ??= (code) => {
      this.exitCode = code;
    });
  }

  get aborted(): boolean {
    return this.abortedWith !== undefined;
  }

  /** Fires the run's signal (now, or when the handler first reads it). */
  abort(reason: Error): void {
    this.abortedWith ??= reason;
    this.controller?.abort(reason);
  }
}

export class Worker {
  readonly id: string;
  private nc: NatsConnection | undefined;
  private ownsConnection = false;
  private requests: Requester | undefined;
  private running = false;
  /** Cleared when claiming is over: the queue had nothing left (untilEmpty) or maxJobs were claimed. */
  private claiming = true;
  /** Jobs this worker has been handed, for maxJobs. */
  private taken = 0;
  private version = 'unknown';
  /** Every run this worker holds: running, held for a slot (`prefetch`), or ended with its completion on its way. */
  private readonly active = new Map<string, Run>();
  /** Runs claimed ahead, waiting for a slot, oldest first. */
  private readonly held: Run[] = [];
  /** Handlers running now: at most `concurrency`. */
  private handlersRunning = 0;
  /** Recent runs' mean time in ms (RUN_MS_WEIGHT on the last); undefined before the first ends. */
  private runMs: number | undefined;
  /** Every run's `ctx.heartbeat`: one function for all of them. */
  private readonly heartbeatNow = (): Promise<void> => this.heartbeat();
  private loop: Promise<void> | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private waiters: (() => void)[] = [];
  /** Slots asked for by claims in flight. */
  private reserved = 0;
  private claimsInFlight = 0;
  private claimBackoff = false;
  /** How long a failed claim waits before it is sent again; doubles while claims keep failing. */
  private claimBackoffMs = 100;
  /** Whether claims carry a `request_id`: cleared once a node refuses the field (older than it). */
  private claimIds = true;
  /** Ends the pauses of failed claims before they are sent again (close, or the queue answering again). */
  private readonly pauses = new Set<() => void>();
  /** Claims have been failing since the last one answered: logged once per streak, not per retry. */
  private claimsFailing = false;
  private readonly log: Logger;
  private readonly concurrency: number;
  private readonly prefetch: number;
  private readonly leaseMs: number;
  private claimWaitMs: number;
  /** 0 once a node refused a waiting next claim (older than `next.wait_ms`). */
  private nextClaimWaitMs: number;
  private readonly host = hostname();
  private readonly user = userName();
  readonly node: string;
  /** Runs finished by this worker, by outcome (for tests and metrics). */
  readonly counts = { succeeded: 0, failed: 0, lost: 0 };
  /**
   * Run ends, one batcher per verb: each request carries the claim for the slots it frees
   * (one round trip per batch of jobs); none while stopping.
   */
  private readonly completions: Record<CompletionVerb, CompletionBatcher> = {
    complete: this.batcher('complete'),
    fail: this.batcher('fail'),
  };

  /** Throws InvalidRequestError for options the worker protocol would refuse on every claim. */
  constructor(private readonly options: WorkerOptions) {
    this.id = options.workerId ?? `${hostname()}-${process.pid}-${randomIds.next().slice(0, 6)}`;
    this.node = options.node ?? defaultNodeName();
    if (!NODE_NAME.test(this.node)) throw new InvalidRequestError(`node must be 1-128 characters of [A-Za-z0-9_.:-], got ${JSON.stringify(this.node)}`);
    this.concurrency = options.concurrency ?? 1;
    this.prefetch = options.prefetch ?? Math.min(this.concurrency, Limits.MaxClaimJobs);
    this.leaseMs = options.leaseMs ?? JobDefaults.leaseMs;
    this.claimWaitMs = options.claimWaitMs ?? 2_000;
    if (!isQueueName(options.queue)) throw new InvalidRequestError(`queue must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(options.queue)}`);
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new InvalidRequestError(`concurrency must be a whole number of at least 1, got ${this.concurrency}`);
    if (!Number.isInteger(this.prefetch) || this.prefetch < 0 || this.prefetch > Limits.MaxClaimJobs) {
      throw new InvalidRequestError(`prefetch must be a whole number 0..${Limits.MaxClaimJobs}, got ${this.prefetch}`);
    }
    if (!Number.isInteger(this.leaseMs) || this.leaseMs < Limits.MinLeaseMs || this.leaseMs > Limits.MaxLeaseMs) {
      throw new InvalidRequestError(`leaseMs must be ${Limits.MinLeaseMs}..${Limits.MaxLeaseMs}, got ${this.leaseMs}`);
    }
    if (options.maxJobs !== undefined && (!Number.isInteger(options.maxJobs) || options.maxJobs < 1)) throw new InvalidRequestError(`maxJobs must be a whole number of at least 1, got ${options.maxJobs}`);
    if (options.maxPriority !== undefined && (!Number.isInteger(options.maxPriority) || options.maxPriority < Priority.Min || options.maxPriority > Priority.Max)) {
      throw new InvalidRequestError(`maxPriority must be ${Priority.Min}..${Priority.Max}, got ${options.maxPriority}`);
    }
    if (options.untilEmpty) this.claimWaitMs = 0;
    if (!Number.isInteger(this.claimWaitMs) || this.claimWaitMs < 0 || this.claimWaitMs > Limits.MaxClaimWaitMs) {
      throw new InvalidRequestError(`claimWaitMs must be 0..${Limits.MaxClaimWaitMs}, got ${this.claimWaitMs}`);
    }
    const nextClaimWaitMs = options.nextClaimWaitMs ?? NEXT_CLAIM_WAIT_MS;
    if (!Number.isInteger(nextClaimWaitMs) || nextClaimWaitMs < 0 || nextClaimWaitMs > Limits.MaxClaimWaitMs) {
      throw new InvalidRequestError(`nextClaimWaitMs must be 0..${Limits.MaxClaimWaitMs}, got ${nextClaimWaitMs}`);
    }
    this.nextClaimWaitMs = Math.min(nextClaimWaitMs, this.claimWaitMs);
    this.log = (options.logger ?? silentLogger).child({ component: 'worker', queue: options.queue, workerId: this.id });
  }

  async start(): Promise<void> {
    if (this.running) return;
    if (this.options.local) this.nc = this.options.local.nc;
    else if (this.options.nc) this.nc = this.options.nc;
    else {
      this.nc = await connectNats(this.options.servers === undefined ? { name: `docket-worker-${this.id}` } : { servers: this.options.servers, name: `docket-worker-${this.id}` });
      this.ownsConnection = true;
    }
    this.version = this.options.version === 'git' ? gitHash() : (this.options.version ?? 'unknown');
    this.running = true;
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), Math.max(100, Math.floor(this.leaseMs / 3)));
    this.loop = this.claimLoop();
    if (this.options.handleSignals) {
      const drain = () => {
        this.log.info('signal received, draining');
        void this.close().then(() => process.exit(0));
      };
      process.once('SIGTERM', drain);
      process.once('SIGINT', drain);
    }
  }

  private requester(): Requester {
    return (this.requests ??= new Requester(this.nc!));
  }

  private async request<T>(verb: WorkVerb, body: unknown, timeoutMs: number): Promise<T> {
    const data = requestBytes(this.nc!, body);
    const { local } = this.options;
    const replyData = local ? await local.work.local(this.options.queue, verb, data, timeoutMs) : (await this.requester().request(subjects.work(this.options.queue, verb), data, timeoutMs)).data;
    const reply = replyFields<T>(replyData);
    // The queue is served again: failed claims waiting to be sent again go now, not after their pause.
    if (this.pauses.size > 0) {
      this.claimBackoffMs = 100;
      for (const wake of [...this.pauses]) wake();
    }
    return reply;
  }

  /** Resolves at the next change of active runs or claims in flight. */
  private nextChange(): Promise<void> {
    return new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  private changed(): void {
    for (const resolve of this.waiters.splice(0)) resolve();
  }

  /**
   * Keeps up to MAX_CLAIMS_IN_FLIGHT claims open, each for the slots free when it was sent, so a
   * freed slot is refilled without waiting for another claim's round trip. Slots asked for are
   * reserved until the reply, so active runs never exceed `concurrency`.
   */
  private async claimLoop(): Promise<void> {
    while (this.running && this.claiming) {
      if (this.budgetLeft() <= 0) {
        // Every job maxJobs allows is claimed or asked for: once the asks are answered, done.
        if (this.reserved === 0) break;
        await this.nextChange();
        continue;
      }
      // One claim may ask for at most MaxClaimJobs; more slots fill over several claims.
      // Claims ahead come only with completions (`capacity`): a claim of the loop's, parked at a
      // queue with nothing ready, would only double the requests of a worker kept idle.
      const free = Math.min(this.concurrency - this.active.size - this.reserved, Limits.MaxClaimJobs, this.budgetLeft());
      if (free <= 0 || this.claimsInFlight >= MAX_CLAIMS_IN_FLIGHT || this.claimBackoff) {
        await this.nextChange();
        continue;
      }
      this.reserved += free;
      this.claimsInFlight += 1;
      void this.claim(free).finally(() => this.changed());
    }
    while (this.claimsInFlight > 0) await this.nextChange();
  }

  /**
   * One claim for `free` reserved slots, sent until it is answered (or the worker closes). A claim
   * that failed may have been taken all the same: its reply lost (the request timed out while the
   * leader was slow, the node forwarding it gave up on the leader, the connection blinked) after
   * its jobs were claimed. So it is sent again as it was, with the same `request_id`: the leader
   * answers a resend with the runs it already handed out for it, claiming nothing new (README
   * "Workers"), instead of those jobs running with nobody working on them until their leases lapse.
   */
  private async claim(free: number): Promise<void> {
    let body: Record<string, unknown> = { ...this.claimFields(free), wait_ms: this.claimWaitMs, ...(this.claimIds ? { request_id: randomIds.next() } : {}) };
    let answered = false;
    try {
      while (this.running) {
        let jobs: WorkerJob[];
        try {
          ({ jobs } = await this.request<{ jobs: WorkerJob[] }>('claim', body, this.claimWaitMs + 10_000));
        } catch (err) {
          if (!this.running) return;
          if ('request_id' in body && refusesField(err, 'request_id')) {
            // A node older than `request_id` refuses the field (its schema is strict): claim
            // without it from now on, as before it existed.
            this.claimIds = false;
            const { request_id: _, ...plain } = body;
            body = plain;
            this.log.info('the node does not take a claim\'s request_id; claims are sent without it (a lost reply leaves its jobs to their leases)');
            continue;
          }
          if (!this.claimsFailing) this.log.warn({ reason: claimFailure(err) }, 'claims failing, retrying until they are answered');
          else this.log.debug({ err }, 'claim failed, retrying');
          this.claimsFailing = true;
          this.claimBackoff = true;
          await this.pause(this.claimBackoffMs);
          this.claimBackoffMs = Math.min(2_000, this.claimBackoffMs * 2);
          this.claimBackoff = false;
          // The loop held other claims back meanwhile.
          this.changed();
          continue;
        }
        // Answered: no longer in flight for the runs it starts (their completions ask whether any
        // claim is out).
        answered = true;
        this.claimsInFlight -= 1;
        this.reserved -= free;
        this.claimBackoffMs = 100;
        if (this.claimsFailing) this.log.info('claims answered again');
        this.claimsFailing = false;
        // untilEmpty: a claim that found nothing means nothing within reach is left.
        if (this.options.untilEmpty && jobs.length === 0) this.claiming = false;
        for (const job of jobs) this.run(job);
        return;
      }
    } finally {
      if (!answered) {
        this.claimsInFlight -= 1;
        this.reserved -= free;
      }
    }
  }

  /** Waits `ms`, or less when the worker closes or a request is answered meanwhile. */
  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.pauses.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.pauses.add(done);
    });
  }

  /** Jobs maxJobs still allows, less those asked for by claims in flight. */
  private budgetLeft(): number {
    return this.options.maxJobs === undefined ? Infinity : this.options.maxJobs - this.taken - this.reserved;
  }

  /** Jobs the completions' next claims have asked for and not yet brought. */
  private asking(): number {
    return this.completions.complete.asking + this.completions.fail.asking;
  }

  /**
   * Runs this worker may hold at once: its slots, and while its runs are short, `prefetch` more
   * claimed ahead by its completions' next claims, which take only jobs ready then.
   */
  private capacity(): number {
    return this.concurrency + (this.runMs !== undefined && this.runMs < PREFETCH_MAX_RUN_MS ? this.prefetch : 0);
  }

  /** A job handed to this worker: it runs now if a slot is free, or waits for one. */
  private run(job: WorkerJob): void {
    this.taken += 1;
    const run = new Run(job, this.node, this.heartbeatNow);
    this.active.set(job.run_id, run);
    if (this.handlersRunning < this.concurrency) this.startRun(run);
    else this.held.push(run);
  }

  private startRun(run: Run): void {
    this.handlersRunning += 1;
    run.startedAt = Date.now();
    void this.execute(run);
  }

  /** A handler returned: its slot takes the oldest held job (one whose lease was lost is dropped). */
  private slotFreed(durationMs: number): void {
    this.handlersRunning -= 1;
    this.runMs = this.runMs === undefined ? durationMs : this.runMs + RUN_MS_WEIGHT * (durationMs - this.runMs);
    while (this.handlersRunning < this.concurrency && this.held.length > 0) {
      const run = this.held.shift()!;
      if (!run.aborted) {
        this.startRun(run);
        continue;
      }
      // Its lease lapsed or the job was cancelled while it waited: not ours to run any more.
      this.log.warn({ jobId: run.job.job_id, runId: run.runId }, 'held job lost before it ran');
      this.active.delete(run.runId);
      this.counts.lost += 1;
      this.changed();
    }
  }

  /**
   * Runs the handler, then reports the run's end. Its slot goes to a held job as soon as the
   * handler returns; the jobs the report's next claim brings are handed to `run` by the batcher.
   */
  private async execute(run: Run): Promise<void> {
    const { job } = run;
    const log = childLogger(this.log, { jobId: job.job_id, runId: job.run_id });
    log.info({ attempt: job.attempt }, 'claimed');
    try {
      let end: RunEnd;
      try {
        end = await this.settle(run);
      } finally {
        // Whatever happened, the handler is over: its slot must not be lost (close() waits for it).
        this.slotFreed(Date.now() - run.startedAt);
      }
      const verb = end.error === undefined ? 'complete' : 'fail';
      const done = await this.completions[verb].report(end);
      let status = 'lost';
      if ('status' in done) {
        this.counts[verb === 'complete' ? 'succeeded' : 'failed'] += 1;
        status = done.status;
      } else if ('refused' in done) {
        // stale_run / invalid_transition: the run lost its job; the log already says how. In a
        // batch its slot was claimed for all the same.
        log.warn({ err: done.refused }, `${verb} refused`);
        this.counts.lost += 1;
      } else {
        log.error(`${verb} not delivered; the lease will lapse`);
      }
      log.info({ status, durationMs: Date.now() - run.startedAt, ...(run.exitCode === undefined ? {} : { exitCode: run.exitCode }) }, 'finished');
    } finally {
      this.active.delete(job.run_id);
      this.changed();
    }
  }

  /** Runs the handler: the run's end as its completion (`result`) or failure (`error`) carries it. */
  private async settle(run: Run): Promise<RunEnd> {
    const { job } = run;
    let end: RunEnd;
    try {
      const result = (await this.options.handler(job, run)) ?? null;
      const bytes = Buffer.byteLength(JSON.stringify(result));
      // The leader refuses a bigger result; failing the run says why, where a refused
      // completion would leave the run to lapse.
      if (bytes > Limits.MaxResultBytes) throw new NonRetryableJobError(`the handler's result is ${bytes} bytes of JSON; at most ${Limits.MaxResultBytes} are stored`);
      end = { run_id: job.run_id, job_id: job.job_id, result };
    } catch (err) {
      const error = coerceError(err);
      const message = cutToBytes(error.message || error.name, Limits.MaxErrorMessageBytes);
      const stack = error.stack ? { stack: cutToBytes(error.stack, Limits.MaxErrorStackBytes) } : {};
      end = { run_id: job.run_id, job_id: job.job_id, error: { message, ...stack, retryable: !(err instanceof NonRetryableJobError) } };
    }
    run.settled = true;
    if (run.exitCode !== undefined) end.exit_code = run.exitCode;
    end.duration_ms = Date.now() - run.startedAt;
    return end;
  }

  private batcher(verb: CompletionVerb): CompletionBatcher {
    return new CompletionBatcher(
      verb,
      (v, body) => this.sendCompletion(v, body),
      // A completion's claim is not counted in `reserved`: with maxJobs the claim loop alone asks,
      // so the bound holds exactly.
      (max) => {
        // The room left by the runs still to end (running or held) and by the jobs claims in
        // flight will bring; while runs are short it holds jobs claimed ahead (`capacity`).
        const want = Math.min(Limits.MaxClaimJobs, this.capacity() - this.handlersRunning - this.held.length - this.reserved - this.asking());
        return this.running && this.claiming && this.options.maxJobs === undefined && want > 0
          ? { ...this.claimFields(want), ...(this.nextMayWait(max) ? { wait_ms: this.nextClaimWaitMs } : {}), ...(this.claimIds ? { request_id: randomIds.next() } : {}) }
          : undefined;
      },
      (attempt) => Math.min(2_000, 100 * 2 ** attempt),
      // In queue order, each to a free slot or held for one (even while closing: the jobs are
      // ours now, and close() waits for them).
      (jobs) => {
        for (const job of jobs) this.run(job);
        this.changed();
      },
      () => this.handlersRunning > 0,
    );
  }

  /** Sends a completion; one whose next claim waits is answered up to that wait later. */
  private async sendCompletion<T>(verb: CompletionVerb, body: unknown): Promise<T> {
    let sent = body as Record<string, unknown> & { next?: { wait_ms?: number; request_id?: string } };
    for (;;) {
      const next = sent.next;
      try {
        return await this.request<T>(verb, sent, 10_000 + (next?.wait_ms ?? 0));
      } catch (err) {
        // A node older than a field of `next` refuses it (its schema is strict): send this
        // completion again, and every later one, without it.
        if (next?.request_id !== undefined && refusesField(err, 'next.request_id')) {
          this.claimIds = false;
          this.log.info('the node does not take a claim\'s request_id (next.request_id); claims are sent without it');
          const { request_id: _, ...plain } = next;
          sent = { ...sent, next: plain };
          continue;
        }
        if (next?.wait_ms !== undefined && refusesField(err, 'next.wait_ms')) {
          this.nextClaimWaitMs = 0;
          this.log.info('the node does not take a waiting next claim (next.wait_ms); completions carry one that does not wait');
          const { wait_ms: _, ...plain } = next;
          sent = { ...sent, next: plain };
          continue;
        }
        throw err;
      }
    }
  }

  /**
   * Whether a completion freeing `slots` may carry a next claim that waits (`nextClaimWaitMs`, a
   * short long poll whose reply is the completion's): when it would be this worker's only claim
   * and every run in flight is in that completion. Then its next claim is parked at the queue as
   * soon as the completion is committed, before a client that sees the completion can submit
   * again (a long poll sent after the reply races that submit, and lost 15-50% of the time: the
   * job then waits for a commit of its own). Nothing else waits on that reply meanwhile: no
   * other run can end, and the claim loop has no free slot to claim for.
   */
  private nextMayWait(slots: number): boolean {
    return this.nextClaimWaitMs > 0 && this.claimsInFlight === 0 && this.active.size === slots;
  }

  /** What every claim of this worker says: who asks, for how many, the lease and the run's meta. */
  private claimFields(max: number): Record<string, unknown> {
    const connectionId = this.nc?.info?.client_id;
    return {
      worker: this.id,
      node: this.node,
      max,
      lease_ms: this.leaseMs,
      host: this.host,
      pid: process.pid,
      version: this.version,
      ...(this.user === undefined ? {} : { user: this.user }),
      ...(connectionId === undefined ? {} : { connection_id: connectionId }),
      ...(this.options.maxPriority === undefined ? {} : { max_priority: this.options.maxPriority }),
    };
  }

  private async heartbeat(): Promise<void> {
    if (this.active.size === 0 || !this.nc) return;
    const runIds = [...this.active.keys()];
    const progress: Record<string, Json> = {};
    for (const [runId, entry] of this.active) {
      if (entry.unsentProgress !== undefined) progress[runId] = entry.unsentProgress;
      entry.unsentProgress = undefined;
    }
    const body = Object.keys(progress).length > 0 ? { worker: this.id, node: this.node, run_ids: runIds, progress } : { worker: this.id, node: this.node, run_ids: runIds };
    try {
      const { lost } = await this.request<{ lost: string[] }>('heartbeat', body, 5_000);
      for (const runId of lost) {
        const entry = this.active.get(runId);
        // A settled run is "lost" once its own completion has been taken: a heartbeat sent while
        // the completion flew is answered after it. Nothing to abort, nothing to warn about.
        if (entry && !entry.settled && !entry.aborted) {
          this.log.warn({ runId, jobId: entry.job.job_id }, 'run lost its job, aborting');
          entry.abort(new Error('run no longer holds its job'));
        }
      }
    } catch (err) {
      this.log.debug({ err }, 'heartbeat failed');
    }
  }

  /** The runs this worker holds: running, held for a slot (`prefetch`), or ended with their completion on its way. */
  get inFlight(): number {
    return this.active.size;
  }

  /** Jobs this worker has been handed so far. */
  get claimed(): number {
    return this.taken;
  }

  /**
   * Resolves once claiming is over (untilEmpty found nothing, maxJobs were claimed, or close())
   * and no run is in flight. Without untilEmpty or maxJobs only close() ends claiming.
   */
  async idle(): Promise<void> {
    await this.loop;
    while (this.active.size > 0) await this.nextChange();
  }

  /** Stops claiming and waits for in-flight runs to finish (drain). */
  async close(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    for (const wake of [...this.pauses]) wake();
    this.changed();
    await this.loop;
    while (this.active.size > 0) await this.nextChange();
    clearInterval(this.heartbeatTimer);
    if (this.ownsConnection) await this.nc?.drain();
    else this.requests?.close();
    this.requests = undefined;
  }
}

/** The user this process runs as; undefined when the system cannot say (no passwd entry). */
function userName(): string | undefined {
  try {
    return userInfo().username.slice(0, 200);
  } catch {
    return undefined;
  }
}

/** The git hash of the working directory's repository, for `version: 'git'`; 'unknown' outside one. */
function gitHash(): string {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 }).trim() || 'unknown';
  } catch {
    return 'unknown';
  }
}

/** `text` cut to at most `maxBytes` of UTF-8 (the leader's bound on error messages and stacks). */
function cutToBytes(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  // A UTF-16 unit is at most 3 bytes of UTF-8 (a surrogate pair: 2 units, 4 bytes), so this
  // many units fit; a high surrogate left alone at the end is dropped.
  const cut = text.slice(0, Math.floor(maxBytes / 3) - 1);
  return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/** Whether a node refused a request for holding `field`: a node older than the field (strict schemas). */
function refusesField(err: unknown, field: string): boolean {
  return err instanceof DocketError && err.code === 'invalid_request' && err.message.includes(field);
}

/** A failed claim in one phrase, without a stack: what a person watching the worker needs. */
function claimFailure(err: unknown): string {
  // nats.js wraps a request's failure (RequestError) around the reason (NoRespondersError, ...).
  const reason = err instanceof Error && err.cause instanceof Error ? err.cause : err;
  const name = reason instanceof Error ? reason.name : '';
  const message = reason instanceof Error ? reason.message : String(reason);
  if (name === 'NoRespondersError' || /no responders/i.test(message)) return 'no docket node is serving the queue';
  if (name === 'TimeoutError' || /timeout/i.test(message)) return 'no reply from a docket node in time';
  return message;
}

/** The host name as a node name: characters a node name may not hold become `-`. */
function defaultNodeName(): string {
  return hostname().replace(/[^A-Za-z0-9_.:-]/g, '-').slice(0, 128) || 'localhost';
}
