/**
 * The Group machine (kind `group`, id = the group's id, partition `sys`; seed 002 §6.3, seed 003's
 * JobGroup): jobs in any queues that run in order (`sequential`) or together (`parallel`), with a
 * status derived from its members' ends by seed 003's rules and recorded by the sys leader:
 * `queued` -> `running` (a member started) -> `completed` (every member succeeded) | `partial`
 * (some member did not succeed, not all were cancelled) | `cancelled` (every member was
 * cancelled). Pure: the members' outcomes arrive on `group.ended`.
 */
import { assign, setup } from 'xstate';
import type { Envelope } from './envelope.js';
import { isLiveStatus, type JobStatus } from './job.machine.js';

export const GROUP_MODES = ['sequential', 'parallel'] as const;
export type GroupMode = (typeof GROUP_MODES)[number];
/** On a member's failure: `stop` cancels the members not started, `continue` goes on, `skip` marks them skipped. */
export const GROUP_ON_FAILURE = ['stop', 'continue', 'skip'] as const;
export type GroupOnFailure = (typeof GROUP_ON_FAILURE)[number];
export type GroupEndStatus = 'completed' | 'partial' | 'cancelled';

export interface GroupMember {
  readonly job_id: string;
  readonly queue: string;
}

export interface GroupCreatedData {
  readonly name: string | null;
  readonly mode: GroupMode;
  readonly on_failure: GroupOnFailure;
  readonly members: readonly GroupMember[];
}

export type GroupEvent =
  | Envelope<'group.created', GroupCreatedData>
  | Envelope<'group.started', { readonly job_id: string }>
  | Envelope<'group.ended', { readonly status: GroupEndStatus }>;

export const GROUP_EVENT_TYPES = ['group.created', 'group.started', 'group.ended'] as const satisfies readonly GroupEvent['type'][];

export type GroupStatus = 'new' | 'queued' | 'running' | GroupEndStatus;

export interface GroupContext {
  readonly name: string | null;
  readonly mode: GroupMode;
  readonly on_failure: GroupOnFailure;
  readonly members: readonly GroupMember[];
  readonly created_at: string | null;
  readonly ended_at: string | null;
}

export const EMPTY_GROUP: GroupContext = { name: null, mode: 'parallel', on_failure: 'continue', members: [], created_at: null, ended_at: null };

export function applyGroupEvent(context: GroupContext, event: GroupEvent): GroupContext {
  switch (event.type) {
    case 'group.created':
      return { ...event.data, created_at: event.time, ended_at: null };
    case 'group.started':
      return context;
    case 'group.ended':
      return { ...context, ended_at: event.time };
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

/**
 * seed 003's derivation from the members' final statuses (null: not ended yet): every member
 * succeeded -> completed; every member cancelled -> cancelled; all ended otherwise -> partial.
 */
export function deriveGroupEnd(statuses: readonly (string | null)[]): GroupEndStatus | null {
  if (statuses.some((s) => s === null)) return null;
  if (statuses.every((s) => s === 'succeeded')) return 'completed';
  if (statuses.every((s) => s === 'cancelled')) return 'cancelled';
  return 'partial';
}

/**
 * What one member brings to the derivation (null: not ended): the status of its retry chain's
 * last attempt (`last`: the member's own job when it has no retry), except that a member whose
 * own run failed counts as failed even when its retry succeeded, since seed 003 derives from the
 * runs and one failed (-> partial).
 */
export function memberEnd(own: JobStatus | null, last: JobStatus | null): JobStatus | null {
  if (last === null || last === 'new' || isLiveStatus(last)) return null;
  return own === 'failed' ? 'failed' : last;
}

type GuardArgs = { context: GroupContext; event: GroupEvent };

export const groupMachine = setup({
  types: { context: {} as GroupContext, events: {} as GroupEvent },
  guards: {
    /** A group has at least one member. */
    hasMembers: ({ event }: GuardArgs) => event.type === 'group.created' && event.data.members.length > 0,
    endsCompleted: ({ event }: GuardArgs) => event.type === 'group.ended' && event.data.status === 'completed',
    endsPartial: ({ event }: GuardArgs) => event.type === 'group.ended' && event.data.status === 'partial',
    endsCancelled: ({ event }: GuardArgs) => event.type === 'group.ended' && event.data.status === 'cancelled',
  },
  actions: { apply: assign(({ context, event }) => applyGroupEvent(context, event)) },
}).createMachine({
  id: 'group',
  initial: 'new',
  context: EMPTY_GROUP,
  states: {
    new: { on: { 'group.created': { guard: 'hasMembers', target: 'queued', actions: 'apply' } } },
    queued: {
      description: 'No member has started.',
      on: {
        'group.started': { target: 'running', actions: 'apply' },
        'group.ended': [
          { guard: 'endsCompleted', target: 'completed', actions: 'apply' },
          { guard: 'endsPartial', target: 'partial', actions: 'apply' },
          { guard: 'endsCancelled', target: 'cancelled', actions: 'apply' },
        ],
      },
    },
    running: {
      description: 'A member started.',
      on: {
        'group.ended': [
          { guard: 'endsCompleted', target: 'completed', actions: 'apply' },
          { guard: 'endsPartial', target: 'partial', actions: 'apply' },
          { guard: 'endsCancelled', target: 'cancelled', actions: 'apply' },
        ],
      },
    },
    completed: { description: 'Every member succeeded.' },
    partial: { description: 'Every member ended; some did not succeed.' },
    cancelled: { description: 'Every member was cancelled.' },
  },
});
