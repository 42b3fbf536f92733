/**
 * The Schedule machine: `new` -> `enabled` <-> `disabled`, -> `deleted`. The only definition of
 * "a tick never fires twice": a cron fire must name a tick later than every tick handled before
 * (`handled_until`), a miss likewise, and only an enabled schedule fires. Which ticks are due and
 * what each policy does is machines/schedule-timing.ts; whether the previous fire's job is still
 * live is the job store's to say (the caller passes it to the planner), not kept here.
 *
 * A put after `deleted` makes the name live again under the next revision: `handled_until` is
 * kept, so the new life's ticks (and the job ids derived from them) never meet the old one's.
 * Pure: time arrives on the events. `scheduleFold` is derived from this machine (fold.ts).
 */
import { assign, setup } from 'xstate';
import type { Decision } from './decider.js';
import { deriveFold, type FoldState } from './fold.js';
import { lastMissedTick, type FireTrigger, type ScheduleEvent, type SchedulePutData } from './schedule.events.js';

export type ScheduleStatus = 'new' | 'enabled' | 'disabled' | 'deleted';

export interface LastFire {
  readonly tick: string;
  readonly job_id: string;
  readonly trigger: FireTrigger;
  /** When the fire was decided (the event's time). */
  readonly at: string;
}

export interface ScheduleContext {
  readonly name: string;
  /** 0 before the first put. */
  readonly revision: number;
  /** The spec in force: the latest put's data. */
  readonly spec: SchedulePutData | null;
  readonly created_at: string;
  readonly updated_at: string;
  /**
   * Every tick at or before this instant is handled: fired, missed, or earlier than the put of
   * the spec in force (a revision's ticks start after its put). The planner starts after it; a
   * cron fire or a miss must be later. null before the first put.
   */
  readonly handled_until: string | null;
  /**
   * When the schedule became enabled (null while it is not): unhandled ticks before it were due
   * while it was disabled, and are missed as `paused`.
   */
  readonly enabled_since: string | null;
  /** The latest fire of any trigger: its job's liveness is what the overlap policy asks about. */
  readonly last_fired: LastFire | null;
  readonly disabled_note: string | null;
  readonly deleted_at: string | null;
  readonly fired_count: number;
  /** Ticks missed, a capped event counting its `count`. */
  readonly missed_count: number;
}

export const EMPTY_SCHEDULE: ScheduleContext = {
  name: '',
  revision: 0,
  spec: null,
  created_at: '',
  updated_at: '',
  handled_until: null,
  enabled_since: null,
  last_fired: null,
  disabled_note: null,
  deleted_at: null,
  fired_count: 0,
  missed_count: 0,
};

/** The later of two ISO instants (null is earlier than any). */
function later(a: string | null, b: string): string {
  return a !== null && Date.parse(a) >= Date.parse(b) ? a : b;
}

/** The context effect of every accepted schedule event: used by the machine and by the fold. */
export function applyScheduleEvent(context: ScheduleContext, event: ScheduleEvent): ScheduleContext {
  switch (event.type) {
    case 'schedule.put': {
      const d = event.data;
      return {
        ...context,
        name: d.name,
        revision: d.revision,
        spec: d,
        created_at: context.revision === 0 ? event.time : context.created_at,
        updated_at: event.time,
        handled_until: later(context.handled_until, event.time),
        // null exactly while not enabled, so a put can tell whether it enables the schedule.
        enabled_since: d.paused ? null : (context.enabled_since ?? event.time),
        disabled_note: null,
        deleted_at: null,
      };
    }
    case 'schedule.enabled':
      return { ...context, updated_at: event.time, enabled_since: event.time, disabled_note: null };
    case 'schedule.disabled':
      return { ...context, updated_at: event.time, enabled_since: null, disabled_note: event.data.note };
    case 'schedule.deleted':
      return { ...context, updated_at: event.time, enabled_since: null, deleted_at: event.time };
    case 'schedule.fired': {
      const trigger = event.data.trigger ?? 'cron';
      return {
        ...context,
        handled_until: trigger === 'cron' ? event.data.tick : context.handled_until,
        last_fired: { tick: event.data.tick, job_id: event.data.job_id, trigger, at: event.time },
        fired_count: context.fired_count + 1,
      };
    }
    case 'schedule.missed':
      return { ...context, handled_until: lastMissedTick(event.data), missed_count: context.missed_count + ('count' in event.data ? event.data.count : 1) };
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

type GuardArgs = { context: ScheduleContext; event: ScheduleEvent };

function isNextRevision({ context, event }: GuardArgs): boolean {
  return event.type === 'schedule.put' && event.data.revision === context.revision + 1 && (context.revision === 0 || event.data.name === context.name);
}

/** Strictly after `handled_until` (every tick is after "nothing handled"). */
function afterHandled(context: ScheduleContext, tick: string): boolean {
  return context.handled_until === null || Date.parse(tick) > Date.parse(context.handled_until);
}

export const scheduleGuards = {
  /** A put names the next revision (from 1, no gaps) and leaves the schedule enabled. */
  putsEnabled: (args: GuardArgs) => isNextRevision(args) && args.event.type === 'schedule.put' && !args.event.data.paused,
  /** A put names the next revision and leaves the schedule disabled (`paused`). */
  putsDisabled: (args: GuardArgs) => isNextRevision(args) && args.event.type === 'schedule.put' && args.event.data.paused,
  /**
   * One fire per tick: a cron fire is later than every handled tick; a backfill fires a past tick
   * (at or before `handled_until`, so never one the cron is still to reach); a manual trigger
   * is not a tick of the cron and carries its own job id.
   */
  isFireable: ({ context, event }: GuardArgs) => {
    if (event.type !== 'schedule.fired' || Number.isNaN(Date.parse(event.data.tick))) return false;
    const trigger = event.data.trigger ?? 'cron';
    if (trigger === 'manual') return true;
    if (trigger === 'backfill') return context.handled_until !== null && !afterHandled(context, event.data.tick);
    return afterHandled(context, event.data.tick);
  },
  /** A miss covers ticks later than every handled tick; a capped miss runs forward and counts at least one. */
  isMissable: ({ context, event }: GuardArgs) => {
    if (event.type !== 'schedule.missed') return false;
    const d = event.data;
    if ('tick' in d) return !Number.isNaN(Date.parse(d.tick)) && afterHandled(context, d.tick);
    return Number.isInteger(d.count) && d.count >= 1 && afterHandled(context, d.from) && Date.parse(d.to) >= Date.parse(d.from) && (d.count === 1) === (d.from === d.to);
  },
};

const puts = [
  { guard: 'putsEnabled', target: 'enabled', actions: 'apply' },
  { guard: 'putsDisabled', target: 'disabled', actions: 'apply' },
] as const;

export const scheduleMachine = setup({
  types: { context: {} as ScheduleContext, events: {} as ScheduleEvent },
  guards: scheduleGuards,
  actions: { apply: assign(({ context, event }) => applyScheduleEvent(context, event)) },
}).createMachine({
  id: 'schedule',
  initial: 'new',
  context: EMPTY_SCHEDULE,
  states: {
    new: { description: 'No put yet.', on: { 'schedule.put': [...puts] } },
    enabled: {
      description: 'Its due ticks fire (or are missed by a policy), each once.',
      on: {
        'schedule.put': [...puts],
        'schedule.disabled': { target: 'disabled', actions: 'apply' },
        'schedule.deleted': { target: 'deleted', actions: 'apply' },
        'schedule.fired': { guard: 'isFireable', target: 'enabled', actions: 'apply' },
        'schedule.missed': { guard: 'isMissable', target: 'enabled', actions: 'apply' },
      },
    },
    disabled: {
      description: 'Nothing fires; on enable, the ticks due meanwhile are missed as paused.',
      on: {
        'schedule.put': [...puts],
        'schedule.enabled': { target: 'enabled', actions: 'apply' },
        'schedule.deleted': { target: 'deleted', actions: 'apply' },
        'schedule.missed': { guard: 'isMissable', target: 'disabled', actions: 'apply' },
      },
    },
    deleted: {
      description: 'Nothing fires. A put makes the name live again under the next revision, after every tick handled before.',
      on: { 'schedule.put': [...puts] },
    },
  },
});

export type ScheduleState = FoldState<ScheduleContext> & { readonly value: ScheduleStatus };

export const scheduleFold = deriveFold<ScheduleContext, ScheduleEvent>(scheduleMachine, { apply: applyScheduleEvent });
export const INITIAL_SCHEDULE_STATE = scheduleFold.initialState as ScheduleState;

/** Folds one event; null when the machine refuses it. */
export function evolveSchedule(state: ScheduleState, event: ScheduleEvent): ScheduleState | null {
  return scheduleFold.step(state, event) as ScheduleState | null;
}

const VERBS: Record<ScheduleEvent['type'], string> = {
  'schedule.put': 'put',
  'schedule.enabled': 'enable',
  'schedule.disabled': 'disable',
  'schedule.deleted': 'delete',
  'schedule.fired': 'fire',
  'schedule.missed': 'record a miss of',
};

const LEADS_TO: Partial<Record<ScheduleEvent['type'], ScheduleStatus>> = { 'schedule.enabled': 'enabled', 'schedule.disabled': 'disabled', 'schedule.deleted': 'deleted' };

/**
 * Decides a candidate event by the fold derived from the machine (the same transitions and
 * guards; XState's own `can()` costs tens of microseconds per fire, and the ticker decides one
 * per schedule per tick); a refusal speaks of the schedule.
 */
export function decideSchedule(state: ScheduleState, candidate: ScheduleEvent): Decision<ScheduleEvent> {
  if (scheduleFold.step(state, candidate) !== null) return { ok: true, event: candidate };
  const name = state.context.name || candidate.aggregate.id;
  const refuse = (reason: string): Decision<ScheduleEvent> => ({ ok: false, code: 'invalid_transition', reason });
  if (state.value === 'new' && candidate.type !== 'schedule.put') return refuse(`cannot ${VERBS[candidate.type]} schedule ${name}: it does not exist`);
  switch (candidate.type) {
    case 'schedule.put':
      return refuse(`cannot put schedule ${name} as revision ${candidate.data.revision}: its next revision is ${state.context.revision + 1}`);
    case 'schedule.fired':
      if (state.value !== 'enabled') return refuse(`cannot fire schedule ${name}: it is ${state.value}`);
      return refuse(`cannot fire schedule ${name} at ${candidate.data.tick}: ticks up to ${state.context.handled_until ?? '-'} are handled (${candidate.data.trigger ?? 'cron'})`);
    case 'schedule.missed':
      if (state.value === 'deleted') return refuse(`cannot record a miss of schedule ${name}: it is deleted`);
      return refuse(`cannot record a miss of schedule ${name}: ticks up to ${state.context.handled_until ?? '-'} are handled`);
    default: {
      const already = LEADS_TO[candidate.type] === state.value ? 'already ' : '';
      return refuse(`cannot ${VERBS[candidate.type]} schedule ${name}: it is ${already}${state.value}`);
    }
  }
}
