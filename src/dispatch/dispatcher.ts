/**
 * Dispatcher (leader only), one per led queue.
 *
 * Answers long-poll claims from the in-memory queue order: the head of the queue goes to the
 * oldest waiting claim, one `job.claimed` append per job (the append opens the run). A job taken
 * for a claim in flight is invisible to other claims; if its append is refused (cancelled
 * meanwhile, not due) it goes back to its place. Woken at once when a job becomes ready; a timer
 * covers delayed jobs and a slow poll covers everything else.
 */
import { hostname } from 'node:os';
import { decideJob, evolveJob, INITIAL_JOB_STATE, type JobEvent, type JobState, type Position } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { envelope, transitionJob, type CommandContext, type JobRef } from '../commands/handle-command.js';
import { JobDefaults } from '../commands/limits.js';
import type { ClaimCommand, ClaimedJob } from '../commands/schemas.js';
import { DocketError } from '../errors.js';
import { eventIdOf } from '../ids.js';
import type { Logger } from '../logger.js';
import type { QueueOrder } from '../projections/queue-order.js';
import type { PartitionWriter } from '../store/partition-writer.js';
import type { FlowGate } from './flow-gate.js';
import { selectClaimable } from './select-claimable.js';
import { claimJobNode } from '../commands/jobnode-commands.js';
import { ParkedKeys } from './parked-keys.js';

type Submitted = Extract<JobEvent, { type: 'job.submitted' }>;

/** A submit handed to a parked claim: appended with its job.claimed; resolves with the submit's position. */
export interface HandedOff {
  /** The submit's index in the events handed to `handOff`. */
  readonly index: number;
  readonly committed: Promise<Position>;
}

/** The job.claimed event of a run a claim opens. */
function claimEvent(ctx: CommandContext, job: JobRef, eventId: string, runId: string, request: ClaimCommand, leaseMs: number): Extract<JobEvent, { type: 'job.claimed' }> {
  return envelope(ctx, 'job.claimed', job, eventId, {
    run_id: runId,
    worker: request.worker,
    host: request.host ?? hostname(),
    pid: request.pid ?? 0,
    version: request.version ?? 'unknown',
    lease_ms: leaseMs,
    ...(request.user === undefined ? {} : { user: request.user }),
    ...(request.connection_id === undefined ? {} : { connection_id: request.connection_id }),
  });
}

/** What a claim's reply says of a job it claimed, from the job's state after its claim. */
function claimedJobOf(job: JobRef, state: JobState, runId: string, leaseMs: number, position: Position): ClaimedJob {
  const { key, params, attempt, max_attempts } = state.job.context;
  // The claim is the job's last event: its position is the run's fencing token.
  return { job_id: job.jobId, run_id: runId, queue: job.queue, key, params, attempt, max_attempts, lease_ms: leaseMs, fencing_token: position };
}


interface Waiter {
  readonly request: ClaimCommand;
  readonly resolve: (jobs: ClaimedJob[]) => void;
  /** Real time (ms) when the claim is answered with no jobs. */
  readonly deadline: number;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Jobs being submitted, as an order `selectClaimable` can take from: in queue order (priority,
 * then submit order); a job put back returns to its place, so the next parked claim may take it.
 */
class SubmitOrder {
  private readonly taken = new Set<string>();
  private from = 0;

  constructor(private readonly ids: readonly string[]) {}

  /** Jobs not taken. */
  get size(): number {
    return this.ids.length - this.taken.size;
  }

  take(_queue: string): string | undefined {
    while (this.from < this.ids.length && this.taken.has(this.ids[this.from]!)) this.from += 1;
    for (let i = this.from; i < this.ids.length; i++) {
      const id = this.ids[i]!;
      if (this.taken.has(id)) continue;
      this.taken.add(id);
      return id;
    }
    return undefined;
  }

  release(_queue: string, id: string): void {
    if (!this.taken.delete(id)) return;
    const at = this.ids.indexOf(id);
    if (at >= 0 && at < this.from) this.from = at;
  }
}

const POLL_MS = 1000;
/** A rate window's timer never fires sooner than this: the next claim's time is not finer. */
const MIN_RATE_TIMER_MS = 5;
export class QueueDispatcher {
  private readonly waiters: Waiter[] = [];
  private dueTimer: NodeJS.Timeout | undefined;
  /** When a rate window held a claim back: it moves on then. */
  private rateTimer: NodeJS.Timeout | undefined;
  /** Jobs of held keys, out of the order's scan until their key is freed. */
  private readonly parkedKeys: ParkedKeys;
  private readonly pollTimer: NodeJS.Timeout;
  private stopped = false;
  /** Job nodes being claimed (their jobnode.claimed in flight): no second claim takes them. */
  private readonly takingNodes = new Set<string>();

  constructor(
    readonly queue: string,
    private readonly ctx: CommandContext,
    private readonly order: QueueOrder,
    private readonly clock: Clock,
    private readonly log: Logger,
    /** Bytes a claim's reply may carry (the connection's max payload less the reply's envelope). */
    private readonly replyBudget: () => number,
    /** Flow control: pause, reservation, concurrency and rate limits (src/dispatch/flow-gate.ts). */
    private readonly gate: FlowGate,
  ) {
    this.parkedKeys = new ParkedKeys(queue, order);
    this.pollTimer = setInterval(() => this.pump(), POLL_MS);
    this.pollTimer.unref();
  }

  /** Claims waiting for jobs. */
  get parked(): number {
    return this.waiters.length;
  }

  /** A claim: resolves with up to `max` jobs, or none after `wait_ms`. */
  claim(request: ClaimCommand): Promise<ClaimedJob[]> {
    if (this.stopped) return Promise.resolve([]);
    return new Promise((resolve) => {
      const waiter: Waiter = { request, resolve, deadline: Date.now() + (request.wait_ms ?? 0), timer: undefined };
      this.waiters.push(waiter);
      this.pump();
      const parked = this.waiters.indexOf(waiter);
      if (parked < 0) return;
      if ((request.wait_ms ?? 0) > 0) {
        this.armWaiter(waiter);
        return;
      }
      // A claim that does not wait is answered now: a zero-delay timer would hold its reply (and
      // a completion carrying it) for a turn of the timers, a millisecond or more.
      this.waiters.splice(parked, 1);
      resolve([]);
    });
  }

  /** Answers the claim with no jobs at its deadline, unless jobs come first. */
  private armWaiter(waiter: Waiter): void {
    clearTimeout(waiter.timer);
    waiter.timer = setTimeout(() => {
      const i = this.waiters.indexOf(waiter);
      if (i >= 0) this.waiters.splice(i, 1);
      waiter.resolve([]);
    }, Math.max(0, waiter.deadline - Date.now()));
  }

  /**
   * A key may run again (one of its runs ended, a claim of it settled): its parked jobs go back to
   * their places, unless a limit still holds it (they would only be parked again).
   */
  freeKey(key: string | null): void {
    if (key !== null && this.parkedKeys.has(key) && this.gate.keyHold(key, this.clock.now()) === null) this.parkedKeys.free(key);
  }

  /** The settings changed: every parked job goes back, to be held again by the new ones or not. */
  freeAllKeys(): void {
    this.parkedKeys.freeAll();
  }

  /** Hands ready jobs to waiting claims. Synchronous up to the appends, which run in parallel. */
  pump(): void {
    let rateRetryAt: number | undefined;
    // Fan-out jobs' node entries go to claims of their node, ahead of the queue order (a queue
    // that never had a fan-out job pays one map lookup here).
    if (this.ctx.jobNodes?.hasQueued(this.queue) === true) this.serveNodeClaims();
    if (this.parkedKeys.size > 0) this.parkedKeys.freeDue(this.clock.now());
    while (this.waiters.length > 0 && !this.stopped) {
      const waiter = this.waiters[0]!;
      const { jobIds, keys, retryAtMs, beyondPriority } = selectClaimable({
        queue: this.queue,
        order: this.order,
        gate: this.gate,
        jobOf: (id) => this.ctx.store.get(id)?.state.job.context,
        max: waiter.request.max ?? 1,
        maxPriority: waiter.request.max_priority,
        replyBudget: this.replyBudget(),
        nowMs: this.clock.now(),
        parked: this.parkedKeys,
      });
      if (retryAtMs !== undefined) rateRetryAt = Math.min(rateRetryAt ?? Infinity, retryAtMs);
      if (jobIds.length === 0 && beyondPriority) {
        // Nothing this claim would take is next in line (the order puts less urgent jobs last):
        // it is answered now rather than block the claims behind it.
        this.waiters.shift();
        clearTimeout(waiter.timer);
        waiter.resolve([]);
        continue;
      }
      if (jobIds.length === 0) break;
      this.waiters.shift();
      clearTimeout(waiter.timer);
      // A claim that settles frees its key's slot: the key's parked jobs may run again.
      const settle = (key: string | null) => {
        this.gate.settled(key);
        this.freeKey(key);
      };
      void Promise.all(jobIds.map((jobId, i) => this.claimOne(jobId, waiter.request).finally(() => settle(keys[i]!)))).then((claimed) => this.answer(waiter, claimed));
    }
    this.armDueTimer();
    this.armRateTimer(rateRetryAt);
  }

  /**
   * Hands queued job nodes to the waiting claims of their worker node (README "Fan-out jobs").
   * A pause or a reservation holds them; the queue's limits do not (they count jobs, and each
   * node runs its entry once).
   */
  private serveNodeClaims(): void {
    const hold = this.gate.queueHold(this.clock.now());
    if (hold?.reason === 'paused' || hold?.reason === 'reservation') return;
    const jobNodes = this.ctx.jobNodes!;
    for (let i = 0; i < this.waiters.length; ) {
      const waiter = this.waiters[i]!;
      const node = waiter.request.node;
      const ids = node === undefined ? [] : jobNodes.queuedFor(this.queue, node).filter((id) => !this.takingNodes.has(id)).slice(0, waiter.request.max ?? 1);
      if (ids.length === 0) {
        i += 1;
        continue;
      }
      this.waiters.splice(i, 1);
      clearTimeout(waiter.timer);
      for (const id of ids) this.takingNodes.add(id);
      const claims = ids.map((id) =>
        claimJobNode(this.ctx, this.queue, id, waiter.request)
          .catch((err: unknown) => {
            if (!(err instanceof DocketError)) this.log.error({ err, jobNodeId: id }, 'job node claim append failed');
            return null;
          })
          .finally(() => this.takingNodes.delete(id)),
      );
      void Promise.all(claims).then((claimed) => this.answer(waiter, claimed));
    }
  }

  private armRateTimer(atMs: number | undefined): void {
    clearTimeout(this.rateTimer);
    this.rateTimer = undefined;
    if (atMs === undefined || this.waiters.length === 0 || this.stopped) return;
    this.rateTimer = setTimeout(() => this.pump(), Math.max(MIN_RATE_TIMER_MS, atMs - this.clock.now()));
    this.rateTimer.unref();
  }

  private armDueTimer(): void {
    clearTimeout(this.dueTimer);
    this.dueTimer = undefined;
    if (this.waiters.length === 0 || this.stopped) return;
    const dueAt = this.order.nextDueAt(this.queue);
    if (dueAt === undefined) return;
    this.dueTimer = setTimeout(() => this.pump(), Math.max(0, dueAt - this.clock.now()));
    this.dueTimer.unref();
  }

  private async claimOne(jobId: string, request: ClaimCommand): Promise<ClaimedJob | null> {
    const runId = this.ctx.ids.next();
    const leaseMs = request.lease_ms ?? JobDefaults.leaseMs;
    try {
      const { record, position } = await transitionJob(this.ctx, jobId, undefined, (current, eventId) => claimEvent(this.ctx, current, eventId, runId, request, leaseMs));
      return claimedJobOf(record, record.state, runId, leaseMs, position);
    } catch (err) {
      this.order.release(this.queue, jobId);
      if (!(err instanceof DocketError)) this.log.error({ err, jobId }, 'claim append failed');
      return null;
    }
  }

  /**
   * Hands jobs being submitted to parked claims: each job's claim is decided on the state its
   * submit leaves and appended with it, so both are stored in one commit or neither is, and the
   * job reaches its worker one commit sooner. Parked claims exist only when nothing in the queue
   * was claimable, so the new jobs are the head of the queue; they go in queue order (priority,
   * then submit order), within the room the limits leave and each claim's reply. Synchronous
   * from the check to the appends, like every decision. Returns the submits handed off; the
   * caller appends the others.
   */
  handOff(writer: PartitionWriter, submits: readonly Submitted[]): HandedOff[] {
    if (this.stopped || this.waiters.length === 0 || submits.length === 0) return [];
    const nowMs = this.clock.now();
    const ready = new Map<string, { readonly event: Submitted; readonly index: number; readonly state: JobState }>();
    submits
      .map((event, index) => ({ event, index, state: evolveJob(INITIAL_JOB_STATE, event) }))
      .filter((c): c is { event: Submitted; index: number; state: JobState } => c.state?.job.value === 'queued' && Date.parse(c.state.job.context.run_at) <= nowMs)
      .sort((a, b) => a.state.job.context.priority - b.state.job.context.priority || a.index - b.index)
      .forEach((c) => ready.set(c.event.data.job_id, c));
    const candidates = new SubmitOrder([...ready.keys()]);
    const handed: HandedOff[] = [];
    while (candidates.size > 0 && this.waiters.length > 0) {
      const waiter = this.waiters[0]!;
      // The same selection as a claim from the queue order: limits, key holds (a held key's job is
      // left for the pump, which parks it in its place), max_priority and the reply's size.
      const { jobIds, keys } = selectClaimable({
        queue: this.queue,
        order: candidates,
        gate: this.gate,
        jobOf: (id) => ready.get(id)?.state.job.context,
        max: waiter.request.max ?? 1,
        maxPriority: waiter.request.max_priority,
        replyBudget: this.replyBudget(),
        nowMs,
      });
      if (jobIds.length === 0) break;
      this.waiters.shift();
      clearTimeout(waiter.timer);
      const claims = jobIds.map((jobId, i) => this.handOne(writer, ready.get(jobId)!, keys[i]!, waiter.request, handed));
      void Promise.all(claims).then((claimed) => this.answer(waiter, claimed));
    }
    return handed;
  }

  /** Appends one handed submit with its claim; resolves with the claimed job, or null when that commit is refused. */
  private handOne(writer: PartitionWriter, submit: { readonly event: Submitted; readonly index: number; readonly state: JobState }, key: string | null, request: ClaimCommand, handed: HandedOff[]): Promise<ClaimedJob | null> {
    const settle = () => {
      this.gate.settled(key);
      this.freeKey(key);
    };
    const job = { queue: this.queue, jobId: submit.event.data.job_id };
    const runId = this.ctx.ids.next();
    const leaseMs = request.lease_ms ?? JobDefaults.leaseMs;
    const claimed = claimEvent(this.ctx, job, eventIdOf(this.ctx.ids.next()), runId, request, leaseMs);
    const after = decideJob(submit.state, claimed).ok ? evolveJob(submit.state, claimed) : null;
    if (after === null) {
      // Not claimable after all: the caller appends the submit alone.
      settle();
      return Promise.resolve(null);
    }
    this.order.takeSubmitted(this.queue, job.jobId);
    const appended = writer.append([submit.event, claimed]);
    handed.push({ index: submit.index, committed: appended.then(([position]) => position!) });
    return appended
      .then(([, position]) => claimedJobOf(job, after, runId, leaseMs, position!), () => null)
      .finally(() => {
        this.order.release(this.queue, job.jobId);
        settle();
      });
  }

  /** Answers a claim with the jobs its appends claimed; when none landed it waits on, as before. */
  private answer(waiter: Waiter, claimed: readonly (ClaimedJob | null)[]): void {
    const jobs = claimed.filter((job): job is ClaimedJob => job !== null);
    if (jobs.length > 0 || this.stopped) {
      waiter.resolve(jobs);
      return;
    }
    // Every taken job was refused (e.g. cancelled meanwhile): the claim waits on, until its
    // deadline, for the next wake-up (not a re-pump now, which could spin on a refused job).
    this.waiters.unshift(waiter);
    this.armWaiter(waiter);
  }

  /** Stops dispatching; waiting claims are answered with no jobs. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.pollTimer);
    clearTimeout(this.dueTimer);
    clearTimeout(this.rateTimer);
    // Parked jobs are "taken" in the node's queue order: give them back for whoever leads next.
    this.parkedKeys.freeAll();
    for (const waiter of this.waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.resolve([]);
    }
  }
}
