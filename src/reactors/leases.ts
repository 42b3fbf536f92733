/**
 * Lease keeper (leader only).
 *
 * Every running job of a queue this node leads has a lease: granted by the claim, extended by
 * heartbeats, kept in memory (heartbeats are not events). A lease that lapses appends
 * `job.failed{reason:"lease_expired"}`. When the node starts or takes a queue over, every running
 * job gets a fresh lease from that moment; if its worker never heartbeats, it fails with
 * `crash_recovery` (DESIGN's recovery matrix). The append goes through transitionJob, so a lapse
 * racing a completion is decided by the machines: one wins, the other is refused.
 */
import { FAN_OUT_WORKER } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { envelope, transitionJob, type CommandContext } from '../commands/handle-command.js';
import { JobDefaults } from '../commands/limits.js';
import { DocketError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { JobChange, JobRecord } from '../store/job-store.js';

type LapseReason = 'lease_expired' | 'crash_recovery';

interface Lease {
  readonly queue: string;
  readonly jobId: string;
  readonly leaseMs: number;
  expiresAt: number;
  reason: LapseReason;
}

export class LeaseKeeper {
  private readonly leases = new Map<string, Lease>();
  private timer: NodeJS.Timeout | undefined;
  private unsubscribeClock: (() => void) | undefined;
  private readonly expiring = new Set<string>();

  constructor(
    private readonly ctx: CommandContext,
    private readonly isLeader: (queue: string) => boolean,
    private readonly clock: Clock,
    private readonly log: Logger,
    /** How often lapses are looked for, in real time. @defaultValue 200 */
    private readonly checkEveryMs = 200,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.check(), this.checkEveryMs);
    this.timer.unref();
    this.unsubscribeClock = this.clock.onChange?.(() => this.check());
  }

  stop(): void {
    clearInterval(this.timer);
    this.unsubscribeClock?.();
    this.leases.clear();
  }

  readonly apply = (change: JobChange): void => {
    const before = change.before?.state.run;
    const after = change.after.state.run;
    if (before?.value === 'running' && before.context.run_id !== null && (after.value !== 'running' || after.context.run_id !== before.context.run_id)) {
      this.leases.delete(before.context.run_id);
    }
    if (after.value === 'running' && after.context.run_id !== null && before?.context.run_id !== after.context.run_id && change.recorded) {
      if (this.isLeader(change.after.queue)) this.grant(change.after, 'lease_expired');
    }
  };

  private grant(record: JobRecord, reason: LapseReason): void {
    const run = record.state.run.context;
    // A fan-out job's own run is held by the leader while its nodes run (src/reactors/fan-out.ts): no worker heartbeats it.
    if (run.run_id === null || this.leases.has(run.run_id) || run.worker === FAN_OUT_WORKER) return;
    const leaseMs = run.lease_ms ?? JobDefaults.leaseMs;
    this.leases.set(run.run_id, { queue: record.queue, jobId: record.jobId, leaseMs, expiresAt: this.clock.now() + leaseMs, reason });
  }

  /** Leading `queue` from now: every running job gets a fresh lease that lapses as crash_recovery. */
  adopt(queue: string, records: Iterable<JobRecord>): void {
    for (const record of records) {
      if (record.queue === queue && record.state.run.value === 'running') this.grant(record, 'crash_recovery');
    }
  }

  drop(queue: string): void {
    for (const [runId, lease] of this.leases) if (lease.queue === queue) this.leases.delete(runId);
  }

  /** Extends the leases of runs that still hold their jobs; returns the run ids that do not. */
  heartbeat(queue: string, runIds: readonly string[]): string[] {
    const lost: string[] = [];
    const now = this.clock.now();
    for (const runId of runIds) {
      const lease = this.held(queue, runId);
      if (!lease) {
        lost.push(runId);
        continue;
      }
      lease.expiresAt = now + lease.leaseMs;
      lease.reason = 'lease_expired';
    }
    return lost;
  }

  /** Whether the run still holds its job of `queue` here (a heartbeat would keep it). */
  holds(queue: string, runId: string): boolean {
    return this.held(queue, runId) !== undefined;
  }

  /** The run's lease when the run still holds its job: the job is running under this very run id. */
  private held(queue: string, runId: string): Lease | undefined {
    const lease = this.leases.get(runId);
    const record = lease ? this.ctx.store.get(lease.jobId) : undefined;
    if (!lease || lease.queue !== queue || !record || record.state.run.value !== 'running' || record.state.run.context.run_id !== runId) return undefined;
    return lease;
  }

  /** The number of leases held (for tests and metrics). */
  get size(): number {
    return this.leases.size;
  }

  check(): void {
    const now = this.clock.now();
    for (const [runId, lease] of this.leases) {
      if (lease.expiresAt > now || this.expiring.has(runId)) continue;
      this.expiring.add(runId);
      void this.expire(runId, lease).finally(() => this.expiring.delete(runId));
    }
  }

  private async expire(runId: string, lease: Lease): Promise<void> {
    const log = this.log.child({ queue: lease.queue, jobId: lease.jobId, runId });
    try {
      await transitionJob(this.ctx, lease.jobId, `lapse:${runId}`, (record, eventId) =>
        envelope(this.ctx, 'job.failed', record, eventId, {
          run_id: runId,
          reason: lease.reason,
          error: { message: lease.reason === 'crash_recovery' ? 'no heartbeat after a restart' : `no heartbeat for ${lease.leaseMs} ms` },
        }),
      );
      log.warn({ reason: lease.reason }, 'lease lapsed, run failed');
    } catch (err) {
      // Refused: the run closed first (completed, failed, cancelled). Its lease is gone with it.
      if (!(err instanceof DocketError)) log.error({ err }, 'lease lapse append failed');
    } finally {
      const current = this.leases.get(runId);
      const record = this.ctx.store.get(lease.jobId);
      if (current && (!record || record.state.run.context.run_id !== runId || record.state.run.value !== 'running')) this.leases.delete(runId);
    }
  }
}
