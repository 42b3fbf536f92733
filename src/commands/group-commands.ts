/**
 * Groups (issue 15; seed 002 §6.3, seed 003's JobGroup), decided on the `sys` leader: a group is
 * `group.created` in partition sys, then its members are submitted to their queues under ids
 * derived from (group, index), so a create resent or resumed after a crash never doubles one. A
 * sequential group's members after the first are submitted `waiting`; the group coordinator
 * (src/reactors/group-coordinator.ts) releases, cancels or skips them as members end, and
 * records `group.started` / `group.ended`.
 */
import type { GroupContext, GroupMember } from '../../machines/index.js';
import { NotFoundError } from '../errors.js';
import { eventIdFor, groupId, groupMemberJobId } from '../ids.js';
import type { AggregateRecord } from '../store/aggregate-store.js';
import type { JobStore } from '../store/job-store.js';
import type { AggregateStore } from '../store/aggregate-store.js';
import { aggregateEnvelope, commandMetaOf, createJob, envelope, transitionAggregate, transitionJob, type CommandContext } from './handle-command.js';
import type { GroupCancelCommand, GroupCreateCommand, GroupGetCommand } from './group-schemas.js';
import type { JobSpec } from './schemas.js';
import { submittedEvent } from './submit.js';
import { applyTemplate } from '../schedules/template-submit.js';
import { dependencyOutcome } from '../reactors/dependencies.js';

/** A member to submit on its queue's leader (the body of the `group.submit` operation). */
export interface GroupMemberSubmit {
  readonly group_id: string;
  readonly job_id: string;
  readonly spec: JobSpec;
  readonly waiting: boolean;
}

export type GroupView = {
  readonly group_id: string;
  readonly name: string | null;
  readonly mode: string;
  readonly on_failure: string;
  readonly status: string;
  readonly created_at: string | null;
  readonly ended_at: string | null;
  readonly members: readonly { readonly job_id: string; readonly queue: string; readonly status: string }[];
};

export function groupViewOf(record: AggregateRecord<GroupContext>, store: JobStore): GroupView {
  const c = record.state.context;
  return {
    group_id: record.id,
    name: c.name,
    mode: c.mode,
    on_failure: c.on_failure,
    status: record.state.value,
    created_at: c.created_at,
    ended_at: c.ended_at,
    // A member not submitted yet (a create resumed by the next sys leader) shows as `new`.
    members: c.members.map((m) => ({ job_id: m.job_id, queue: m.queue, status: store.statusOf(m.job_id) ?? 'new' })),
  };
}

/**
 * On the sys leader: records the group (one sys commit), then submits its members to their
 * queues through `submitMember` (the queue leaders). Resent with the same command id, it finds
 * its group and submits whatever is missing.
 */
export async function createGroup(
  ctx: CommandContext,
  command: GroupCreateCommand,
  submitMember: (queue: string, member: GroupMemberSubmit) => Promise<unknown>,
): Promise<{ group_id: string; jobs: string[]; replayed: boolean }> {
  const id = groupId(command.id, ctx.ids);
  const members: GroupMember[] = command.jobs.map((spec, index) => ({ job_id: groupMemberJobId(id, index), queue: spec.queue }));
  const ref = { kind: 'group' as const, id };
  const { replayed } = await transitionAggregate<GroupContext>(ctx, ref, command.id, (_state, eventId) =>
    aggregateEnvelope(ctx, 'group.created', ref, eventId, { name: command.name ?? null, mode: command.mode, on_failure: command.on_failure ?? 'stop', members }, commandMetaOf(command.id, command)),
  );
  await submitMembers(command.mode, id, command.jobs, submitMember);
  return { group_id: id, jobs: members.map((m) => m.job_id), replayed };
}

/** Submits each member (idempotent by its derived id): a sequential group's first is queued, the rest wait. */
export async function submitMembers(mode: string, group: string, specs: readonly JobSpec[], submitMember: (queue: string, member: GroupMemberSubmit) => Promise<unknown>): Promise<void> {
  await Promise.all(specs.map((spec, index) => submitMember(spec.queue, { group_id: group, job_id: groupMemberJobId(group, index), spec, waiting: mode === 'sequential' && index > 0 })));
}

/** On the member's queue leader: creates the member job (a resend finds it). */
export async function submitGroupMember(ctx: CommandContext, member: GroupMemberSubmit): Promise<Record<string, unknown>> {
  const eventId = eventIdFor(`group:${member.group_id}`, member.job_id);
  // A member may name a template, as a submit may (src/schedules/template-submit.ts).
  const made = applyTemplate(member.spec, ctx.aggregates);
  const { record } = await createJob(ctx, submittedEvent(ctx, made.spec, member.job_id, eventId, {}, member.waiting, made.madeFrom));
  return { job_id: record.jobId, status: record.state.job.value };
}

/** On a member's queue leader: the coordinator's decision on a waiting or queued member (idempotent by its derived event id). */
export async function decideGroupMember(ctx: CommandContext, body: { group_id: string; job_id: string; action: 'release' | 'cancel' | 'skip'; reason: string | null }): Promise<Record<string, unknown>> {
  const { record } = await transitionJob(ctx, body.job_id, `group:${body.group_id}:${body.action}`, (current, eventId) =>
    body.action === 'release'
      ? envelope(ctx, 'job.released', current, eventId, {})
      : body.action === 'cancel'
        ? envelope(ctx, 'job.cancelled', current, eventId, { reason: body.reason })
        : envelope(ctx, 'job.skipped', current, eventId, { run_id: null, reason: body.reason }),
  );
  return { job_id: record.jobId, status: record.state.job.value };
}

export function getGroup(store: JobStore, aggregates: AggregateStore, command: GroupGetCommand): GroupView {
  const record = aggregates.get<GroupContext>('group', command.group_id);
  if (!record) throw new NotFoundError(`group ${command.group_id} not found`, { details: { group_id: command.group_id } });
  return groupViewOf(record, store);
}

export function listGroups(store: JobStore, aggregates: AggregateStore): { groups: Omit<GroupView, 'members'>[] } {
  const groups: Omit<GroupView, 'members'>[] = [];
  for (const record of aggregates.values()) {
    if (record.kind !== 'group') continue;
    const { members: _members, ...view } = groupViewOf(record as AggregateRecord<GroupContext>, store);
    groups.push(view);
  }
  return { groups: groups.sort((a, b) => ((a.created_at ?? '') < (b.created_at ?? '') ? -1 : 1)) };
}

/**
 * Cancels the group's live members (each on its queue's leader), and the retry under way of a
 * member that failed (its chain goes on there); the group ends when they have.
 */
export async function cancelGroup(ctx: CommandContext, command: GroupCancelCommand, decide: (queue: string, body: Parameters<typeof decideGroupMember>[1]) => Promise<unknown>): Promise<{ group_id: string; cancelled: string[] }> {
  const group = getGroup(ctx.store, ctx.aggregates, { group_id: command.group_id });
  const live = group.members.flatMap((m) => {
    if (m.status === 'waiting' || m.status === 'queued' || m.status === 'running') return [m];
    const outcome = m.status === 'failed' ? dependencyOutcome(ctx, m.job_id) : undefined;
    // A retry stays in its member's queue.
    return outcome?.kind === 'pending' && outcome.watch !== m.job_id ? [{ ...m, job_id: outcome.watch }] : [];
  });
  await Promise.all(live.map((m) => decide(m.queue, { group_id: group.group_id, job_id: m.job_id, action: 'cancel', reason: command.reason ?? 'group cancelled' }).catch(() => undefined)));
  return { group_id: group.group_id, cancelled: live.map((m) => m.job_id) };
}
