/**
 * Group coordination (issue 15), a reactor of the `sys` leader: as members end (a failed member
 * once its retry chain has: its last attempt decides) it releases the next member of a
 * sequential group, or (on a failure, by `on_failure`) cancels or skips the ones not started, and records `group.started` and `group.ended` (seed 003's derivation). Every node
 * folds every partition, so the sys leader sees every member's events; its decisions on members
 * go to their queues' leaders, each idempotent by a derived event id. On adoption (start,
 * failover) it submits members a crash left unsubmitted and decides whatever ended meanwhile.
 */
import { deriveGroupEnd, isLiveStatus, memberEnd, type GroupContext, type JobStatus } from '../../machines/index.js';
import { aggregateEnvelope, transitionAggregate, type CommandContext } from '../commands/handle-command.js';
import type { decideGroupMember } from '../commands/group-commands.js';
import { DocketError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { AggregateChange, AggregateRecord } from '../store/aggregate-store.js';
import type { JobChange, JobRecord } from '../store/job-store.js';
import { dependencyOutcome } from './dependencies.js';
import type { SysReactor } from './sys-reactor.js';

type Decision = Parameters<typeof decideGroupMember>[1];
/** A member has ended once it is no longer live (the Job machine's statuses say which are). */
const ended = (status: JobStatus | null): status is JobStatus => status !== null && status !== 'new' && !isLiveStatus(status);
const STARTED = new Set(['running', 'succeeded', 'failed']);

/**
 * A member's status as its retry chain stands (null: not submitted yet). A failed member with a
 * retry to come or under way has not ended (`running`: it started, and its chain goes on); the
 * chain's last attempt decides, as for a dependency (./dependencies.ts).
 */
export function memberStatus(ctx: CommandContext, jobId: string): JobStatus | null {
  // statusOf: an evicted member is known by its compact entry.
  const own = ctx.store.statusOf(jobId) ?? null;
  if (own !== 'failed') return own;
  const outcome = dependencyOutcome(ctx, jobId);
  if (outcome === undefined) return own;
  if (outcome.kind === 'succeeded') return 'succeeded';
  if (outcome.kind === 'pending') return 'running';
  return outcome.status as JobStatus;
}

export interface GroupCoordinatorOptions {
  readonly ctx: CommandContext;
  readonly isSysLeader: () => boolean;
  /** Runs a member decision on its queue's leader. */
  readonly decide: (queue: string, body: Decision) => Promise<unknown>;
  readonly log: Logger;
}

export class GroupCoordinator implements SysReactor {
  /** Member job id -> group id, on every node. */
  private readonly groupOf = new Map<string, string>();
  private readonly busy = new Set<string>();
  private readonly again = new Set<string>();

  constructor(private readonly options: GroupCoordinatorOptions) {
    // Groups folded before this node started (from the log or a checkpoint): their sys partition needs a leader.
    for (const record of options.ctx.aggregates.values()) if (record.kind === 'group') this.index(record as AggregateRecord<GroupContext>);
  }

  readonly applyAggregate = (change: AggregateChange): void => {
    if (change.after.kind === 'group') this.index(change.after as AggregateRecord<GroupContext>);
  };

  /** Members of a live group point at it; an ended group's members are forgotten. */
  private index(record: AggregateRecord<GroupContext>): void {
    const live = record.state.value === 'queued' || record.state.value === 'running';
    for (const member of record.state.context.members) {
      if (live) this.groupOf.set(member.job_id, record.id);
      else this.groupOf.delete(member.job_id);
    }
  }

  readonly applyJob = (change: JobChange): void => {
    const group = this.groupOfChain(change.after);
    if (group !== undefined && this.options.isSysLeader()) this.evaluate(group);
  };

  /** The live group of a member, or of the member a retry (of a retry ...) continues. */
  private groupOfChain(record: JobRecord): string | undefined {
    let group = this.groupOf.get(record.jobId);
    let retryOf = record.state.job.context.retry_of;
    for (let hops = 0; group === undefined && retryOf !== null && hops < 10_000; hops++) {
      group = this.groupOf.get(retryOf);
      retryOf = this.options.ctx.store.get(retryOf)?.state.job.context.retry_of ?? null;
    }
    return group;
  }

  /** Leading sys from now (start, failover): every live group, as folded, is looked at again. */
  adopt(): void {
    for (const record of this.options.ctx.aggregates.values()) if (record.kind === 'group') this.index(record as AggregateRecord<GroupContext>);
    for (const group of new Set(this.groupOf.values())) this.evaluate(group);
  }

  drop(): void {
    this.again.clear();
  }

  needsLeader(): boolean {
    return this.groupOf.size > 0;
  }

  private evaluate(group: string): void {
    if (this.busy.has(group)) {
      this.again.add(group);
      return;
    }
    this.busy.add(group);
    void this.step(group)
      .catch((err: unknown) => {
        if (!(err instanceof DocketError)) this.options.log.error({ err, group_id: group }, 'coordinating a group failed');
      })
      .finally(() => {
        this.busy.delete(group);
        if (this.again.delete(group) && this.options.isSysLeader()) this.evaluate(group);
      });
  }

  private async step(group: string): Promise<void> {
    const { ctx, decide } = this.options;
    const record = ctx.aggregates.get<GroupContext>('group', group);
    if (!record || !['queued', 'running'].includes(record.state.value)) return;
    const { members, mode, on_failure } = record.state.context;
    const statuses = members.map((m) => memberStatus(ctx, m.job_id));
    // Members not submitted yet: the create is still submitting them, or a crash stopped it
    // after the group's commit (their specs are in the command, not the log: resending the
    // create with its id submits them, as DESIGN's multi-partition commands are completed).
    if (statuses.some((s) => s === null)) return;
    const ref = { kind: 'group' as const, id: group };
    const started = statuses.findIndex((s) => s !== null && STARTED.has(s));
    if (record.state.value === 'queued' && started >= 0) {
      await transitionAggregate(ctx, ref, `group-started:${group}`, (_s, eventId) => aggregateEnvelope(ctx, 'group.started', ref, eventId, { job_id: members[started]!.job_id }));
    }
    const failedAt = statuses.findIndex((s) => ended(s) && s !== 'succeeded');
    const notStarted = (i: number) => statuses[i] === 'waiting' || statuses[i] === 'queued';
    if (failedAt >= 0 && on_failure !== 'continue') {
      // stop cancels the members not started; skip marks them skipped (both in either mode).
      const action = on_failure === 'stop' ? 'cancel' : 'skip';
      const reason = `group member ${members[failedAt]!.job_id} ${statuses[failedAt]!}`;
      await Promise.all(members.map((m, i) => (notStarted(i) ? decide(m.queue, { group_id: group, job_id: m.job_id, action, reason }) : undefined)));
    } else if (mode === 'sequential') {
      // The first member not ended; if every one before it has ended, it may go.
      const next = statuses.findIndex((s) => !ended(s));
      if (next > 0 && statuses[next] === 'waiting') await decide(members[next]!.queue, { group_id: group, job_id: members[next]!.job_id, action: 'release', reason: null });
    }
    const now = members.map((m) => memberStatus(ctx, m.job_id));
    const end = deriveGroupEnd(members.map((m, i) => memberEnd(ctx.store.statusOf(m.job_id) ?? null, now[i]!)));
    if (end !== null) {
      await transitionAggregate(ctx, ref, `group-ended:${group}`, (_s, eventId) => aggregateEnvelope(ctx, 'group.ended', ref, eventId, { status: end }));
      this.options.log.info({ group_id: group, status: end }, 'group ended');
    }
  }
}
