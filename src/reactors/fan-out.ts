/**
 * Fan-out coordinator (leader of the job's queue; seed 004's leader phase).
 *
 * - Ends a fan-out job by the quorum rule (`fanOutVerdict`, machines/jobnode.machine.ts) as its
 *   nodes end: `job.succeeded` once a quorum completed and the rest ended, `job.failed` once the
 *   quorum can no longer be reached; nodes still live when the job ends are `jobnode.skipped` in
 *   the same commit. `quorum_timeout_ms` after the first node completed, every node not ended is
 *   skipped and the job decided.
 * - A job ended otherwise (cancelled) ends its live nodes (`jobnode.cancelled`).
 * - Queues a retrying node again at its retry_at (`jobnode.requeued`).
 * - Keeps node runs' leases (claim, heartbeats): a lapse is the run's failure (retried or failed
 *   like a worker's). On start or takeover every running node gets a fresh lease that lapses as
 *   `crash_recovery`, as for jobs (DESIGN's recovery matrix).
 * Every decision goes through the machines; a decision racing another is refused by them.
 */
import {
  FAN_OUT_WORKER,
  fanOutVerdict,
  LIVE_JOBNODE_STATUSES,
  quorumDeadlineMs,
  type AggregateEvent,
  type FoldState,
  type JobEvent,
  type JobNodeContext,
  type JobNodeStatus,
} from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { aggregateEnvelope, envelope, transitionAggregate, type CommandContext } from '../commands/handle-command.js';
import { decideAll, lapseNodeRun } from '../commands/jobnode-commands.js';
import { JobDefaults } from '../commands/limits.js';
import { DocketError } from '../errors.js';
import { eventIdFor, eventIdOf } from '../ids.js';
import type { Logger } from '../logger.js';
import type { JobNodeEntry, JobNodeIndex } from '../projections/job-nodes.js';
import type { AggregateChange } from '../store/aggregate-store.js';
import type { JobChange } from '../store/job-store.js';

type LapseReason = 'lease_expired' | 'crash_recovery';

interface NodeLease {
  readonly queue: string;
  readonly id: string;
  readonly leaseMs: number;
  expiresAt: number;
  reason: LapseReason;
}

const isLive = (status: string) => LIVE_JOBNODE_STATUSES.includes(status as JobNodeStatus);

export class FanOutCoordinator {
  private readonly leases = new Map<string, NodeLease>();
  private readonly expiring = new Set<string>();
  private readonly requeueTimers = new Map<string, { readonly queue: string; readonly timer: NodeJS.Timeout }>();
  private readonly quorumTimers = new Map<string, { readonly queue: string; readonly timer: NodeJS.Timeout }>();
  private readonly settling = new Set<string>();
  private readonly again = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: CommandContext & { readonly jobNodes: JobNodeIndex },
    private readonly isLeader: (queue: string) => boolean,
    private readonly clock: Clock,
    private readonly log: Logger,
    /** How often node leases are looked at, in real time. @defaultValue 200 */
    private readonly checkEveryMs = 200,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.checkLeases(), this.checkEveryMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    for (const queue of new Set([...this.requeueTimers.values(), ...this.quorumTimers.values()].map((t) => t.queue))) this.drop(queue);
    this.leases.clear();
  }

  readonly applyAggregate = ({ before, after, event }: AggregateChange): void => {
    if (after.kind !== 'jobnode' || after.queue === null) return;
    const state = after.state as FoldState<JobNodeContext>;
    const prev = before?.state as FoldState<JobNodeContext> | undefined;
    const prevRun = prev?.value === 'running' ? prev.context.run_id : null;
    if (prevRun !== null && (state.value !== 'running' || state.context.run_id !== prevRun)) this.leases.delete(prevRun);
    if (event === undefined || !this.isLeader(after.queue)) return;
    if (state.value === 'running' && state.context.run_id !== prevRun) this.grant(after.queue, after.id, state, 'lease_expired');
    if (state.value === 'retrying') this.armRequeue(after.queue, after.id, state);
    if (state.value !== prev?.value) this.settle(after.queue, state.context.job_id);
  };

  readonly applyJob = (change: JobChange): void => {
    // An ordinary job costs one lookup in an index that is empty without fan-out jobs.
    if (!this.ctx.jobNodes.isFanOut(change.after.jobId)) return;
    if (change.recorded === undefined || !this.isLeader(change.after.queue)) return;
    if (change.before?.state.job.value === 'running' && change.after.state.job.value !== 'running') this.settle(change.after.queue, change.after.jobId);
  };

  /** Leading `queue` from now (its partition folded to its tip): leases, retries and verdicts as the log leaves them. */
  adopt(queue: string): void {
    for (const jobId of this.ctx.jobNodes.jobsOf(queue)) {
      for (const entry of this.ctx.jobNodes.nodesOf(jobId)) {
        if (entry.state.value === 'running') this.grant(queue, entry.id, entry.state, 'crash_recovery');
        if (entry.state.value === 'retrying') this.armRequeue(queue, entry.id, entry.state);
      }
      this.settle(queue, jobId);
    }
  }

  drop(queue: string): void {
    for (const [runId, lease] of this.leases) if (lease.queue === queue) this.leases.delete(runId);
    for (const timers of [this.requeueTimers, this.quorumTimers]) {
      for (const [id, t] of timers) {
        if (t.queue !== queue) continue;
        clearTimeout(t.timer);
        timers.delete(id);
      }
    }
  }

  /** Extends the leases of node runs among `runIds`; returns those that hold no job node here. */
  heartbeat(queue: string, runIds: readonly string[]): string[] {
    const now = this.clock.now();
    return runIds.filter((runId) => {
      const lease = this.leases.get(runId);
      if (lease === undefined || lease.queue !== queue) return true;
      lease.expiresAt = now + lease.leaseMs;
      lease.reason = 'lease_expired';
      return false;
    });
  }

  /** Whether a node run holds its job node of `queue` here (a heartbeat would keep it). */
  holds(queue: string, runId: string): boolean {
    return this.leases.get(runId)?.queue === queue;
  }

  /** Node run leases held (tests). */
  get leaseCount(): number {
    return this.leases.size;
  }

  private grant(queue: string, id: string, state: FoldState<JobNodeContext>, reason: LapseReason): void {
    const runId = state.context.run_id;
    if (runId === null || this.leases.has(runId)) return;
    const leaseMs = state.context.lease_ms ?? JobDefaults.leaseMs;
    this.leases.set(runId, { queue, id, leaseMs, expiresAt: this.clock.now() + leaseMs, reason });
  }

  private checkLeases(): void {
    const now = this.clock.now();
    for (const [runId, lease] of this.leases) {
      if (lease.expiresAt > now || this.expiring.has(runId)) continue;
      this.expiring.add(runId);
      void lapseNodeRun(this.ctx, lease.queue, lease.id, runId, lease.reason, lease.leaseMs)
        .then(() => this.log.warn({ queue: lease.queue, jobNodeId: lease.id, runId, reason: lease.reason }, 'node run lease lapsed'))
        .catch((err: unknown) => {
          if (!(err instanceof DocketError)) this.log.error({ err, jobNodeId: lease.id }, 'node lease lapse append failed');
        })
        .finally(() => {
          this.expiring.delete(runId);
          this.leases.delete(runId);
        });
    }
  }

  private armRequeue(queue: string, id: string, state: FoldState<JobNodeContext>): void {
    if (this.requeueTimers.has(id) || state.context.retry_at === null) return;
    const attempt = state.context.attempt;
    const retryAt = Date.parse(state.context.retry_at);
    const timer = setTimeout(() => {
      this.requeueTimers.delete(id);
      if (!this.isLeader(queue)) return;
      // A timer may fire a moment early by the clock; the machine refuses a requeue before retry_at.
      if (this.clock.now() < retryAt) {
        this.armRequeue(queue, id, state);
        return;
      }
      const ref = { kind: 'jobnode' as const, id, queue };
      transitionAggregate(this.ctx, ref, `requeue:${id}:${attempt}`, (_s, eventId) => aggregateEnvelope(this.ctx, 'jobnode.requeued', ref, eventId, {})).catch((err: unknown) => {
        // Refused: the job ended and skipped or cancelled the node meanwhile.
        if (!(err instanceof DocketError)) this.log.error({ err, jobNodeId: id }, 'job node requeue failed');
      });
    }, Math.max(1, retryAt - this.clock.now()));
    timer.unref();
    this.requeueTimers.set(id, { queue, timer });
  }

  private armQuorumTimer(queue: string, jobId: string, deadlineMs: number): void {
    if (this.quorumTimers.has(jobId)) return;
    const timer = setTimeout(() => {
      this.quorumTimers.delete(jobId);
      // Early by the clock: wait on (decide() would find the job pending and arm nothing).
      if (this.clock.now() < deadlineMs) this.armQuorumTimer(queue, jobId, deadlineMs);
      else this.settle(queue, jobId);
    }, Math.max(1, deadlineMs - this.clock.now()));
    timer.unref();
    this.quorumTimers.set(jobId, { queue, timer });
  }

  /** Decides the job's end from its nodes, one decision per job at a time (a change meanwhile decides again after). */
  private settle(queue: string, jobId: string): void {
    if (this.settling.has(jobId)) {
      this.again.add(jobId);
      return;
    }
    this.settling.add(jobId);
    void this.settleOnce(queue, jobId)
      .catch((err: unknown) => {
        if (!(err instanceof DocketError)) this.log.error({ err, jobId }, 'fan-out decision failed');
      })
      .finally(() => {
        this.settling.delete(jobId);
        if (this.again.delete(jobId)) this.settle(queue, jobId);
      });
  }

  private async settleOnce(queue: string, jobId: string): Promise<void> {
    if (!this.isLeader(queue)) return;
    const writer = await this.ctx.writer(queue);
    // Decide on committed state: wait out the job's and its nodes' events still in the writer.
    for (;;) {
      const busy = writer.isBusy(jobId) ? jobId : this.ctx.jobNodes.nodesOf(jobId).find((e) => writer.isBusy(e.id, 'jobnode'))?.id;
      if (busy === undefined) break;
      await (busy === jobId ? writer.settled(jobId) : writer.settled(busy, 'jobnode'));
    }
    const record = this.ctx.store.get(jobId);
    const nodes = this.ctx.jobNodes.nodesOf(jobId);
    if (record === undefined || nodes.length === 0) return;
    const events = this.decide(record.jobId, record.queue, record.state, nodes);
    if (events.length === 0) return;
    if (!decideAll(this.ctx, record.state, events)) {
      this.log.warn({ jobId, events: events.map((e) => e.type) }, 'fan-out decision refused by the machines; decided again on the next change');
      return;
    }
    await writer.append(events);
  }

  /** The events that settle the job now (none while it is pending); arms the quorum timer. */
  private decide(jobId: string, queue: string, job: NonNullable<ReturnType<CommandContext['store']['get']>>['state'], nodes: readonly JobNodeEntry[]): (JobEvent | AggregateEvent)[] {
    const live = nodes.filter((e) => isLive(e.state.value));
    const nodeEnd = (e: JobNodeEntry, type: 'jobnode.skipped' | 'jobnode.cancelled', reason: string) =>
      aggregateEnvelope(this.ctx, type, { kind: 'jobnode', id: e.id, queue }, eventIdOf(this.ctx.ids.next()), { reason });
    if (job.job.value !== 'running' || job.run.context.worker !== FAN_OUT_WORKER) {
      // The job ended by a command (cancel): its live nodes end with it.
      const cancelled = job.job.value === 'cancelled';
      return live.map((e) => nodeEnd(e, cancelled ? 'jobnode.cancelled' : 'jobnode.skipped', `job ${job.job.value}`));
    }
    const { of, quorum } = nodes[0]!.state.context;
    const deadline = quorumDeadlineMs(nodes.map((e) => e.state));
    const timedOut = deadline !== null && this.clock.now() >= deadline && live.length > 0 && nodes.length === of;
    const statuses = nodes.map((e) => (timedOut && isLive(e.state.value) ? 'skipped' : e.state.value) as JobNodeStatus);
    const verdict = fanOutVerdict(of, quorum, statuses);
    if (verdict === 'pending') {
      if (deadline !== null) this.armQuorumTimer(queue, jobId, deadline);
      return [];
    }
    const reason = timedOut ? 'quorum_timeout' : verdict === 'succeeded' ? 'quorum_reached' : 'quorum_lost';
    const runId = job.run.context.run_id!;
    const completed = statuses.filter((s) => s === 'completed').length;
    const summary = Object.fromEntries(nodes.map((e, i) => [e.state.context.node, statuses[i]!]));
    const ref = { queue, jobId };
    const eventId = eventIdFor(`fan-out:${runId}`, jobId);
    const end =
      verdict === 'succeeded'
        ? envelope(this.ctx, 'job.succeeded', ref, eventId, { run_id: runId, result: { quorum, completed, nodes: summary } })
        : envelope(this.ctx, 'job.failed', ref, eventId, {
            run_id: runId,
            reason: 'error',
            // Not retryable: each node had its own attempts; a resubmit fans out again.
            error: { message: `quorum not reached (${reason}): ${completed} of ${of} nodes completed, ${quorum} needed`, retryable: false },
          });
    return [...live.map((e) => nodeEnd(e, 'jobnode.skipped', reason)), end];
  }
}
