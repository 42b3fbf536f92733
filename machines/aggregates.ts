/**
 * The aggregate kinds other than `job` (which folds two machines, machines/job.aggregate.ts):
 * each kind's machine and the fast fold derived from it, in one table the kernel folds every
 * commit through. A kind is added here once; the store, the tail, checkpoints, the audit and
 * replay then know it.
 */
import type { AnyStateMachine } from 'xstate';
import type { Decision } from './decider.js';
import { machineAccepts } from './decider.js';
import type { AggregateKind, Envelope } from './envelope.js';
import { deriveFold, type Fold, type FoldState } from './fold.js';
import { applyQueueEvent, QUEUE_EVENT_TYPES, queueMachine, type QueueContext, type QueueEvent } from './queue.machine.js';
import { applyGroupEvent, GROUP_EVENT_TYPES, groupMachine, type GroupContext, type GroupEvent } from './group.machine.js';
import { applyReservationEvent, RESERVATION_EVENT_TYPES, reservationMachine, type ReservationContext, type ReservationEvent } from './reservation.machine.js';
import { applyJobNodeEvent, JOBNODE_EVENT_TYPES, jobNodeMachine, type JobNodeContext, type JobNodeEvent } from './jobnode.machine.js';
import { SCHEDULE_EVENT_TYPES, type ScheduleEvent } from './schedule.events.js';
import { decideSchedule, scheduleFold, scheduleMachine, type ScheduleContext, type ScheduleState } from './schedule.machine.js';
import { TEMPLATE_EVENT_TYPES, type TemplateEvent } from './template.events.js';
import { decideTemplate, templateFold, templateMachine, type TemplateContext, type TemplateState } from './template.machine.js';

export interface AggregateDefinition<C = unknown, E extends Envelope = Envelope> {
  readonly kind: Exclude<AggregateKind, 'job'>;
  readonly machine: AnyStateMachine;
  readonly fold: Fold<C, E>;
  readonly eventTypes: readonly E['type'][];
  /** The aggregate lives in its queue's partition (`q.<queue>`), not in `sys`. */
  readonly inQueue: boolean;
}

export const queueAggregate: AggregateDefinition<QueueContext, QueueEvent> = {
  kind: 'queue',
  machine: queueMachine,
  fold: deriveFold<QueueContext, QueueEvent>(queueMachine, { apply: applyQueueEvent }),
  eventTypes: QUEUE_EVENT_TYPES,
  inQueue: true,
};

export const reservationAggregate: AggregateDefinition<ReservationContext, ReservationEvent> = {
  kind: 'reservation',
  machine: reservationMachine,
  fold: deriveFold<ReservationContext, ReservationEvent>(reservationMachine, { apply: applyReservationEvent }),
  eventTypes: RESERVATION_EVENT_TYPES,
  inQueue: true,
};

/** Job nodes live in their job's queue partition (id derived from (job id, node): src/ids.ts jobNodeId). */
export const jobNodeAggregate: AggregateDefinition<JobNodeContext, JobNodeEvent> = {
  kind: 'jobnode',
  machine: jobNodeMachine,
  fold: deriveFold<JobNodeContext, JobNodeEvent>(jobNodeMachine, { apply: applyJobNodeEvent }),
  eventTypes: JOBNODE_EVENT_TYPES,
  inQueue: true,
};

/** Groups live in partition `sys` (id = the group's id); the sys leader coordinates their members. */
export const groupAggregate: AggregateDefinition<GroupContext, GroupEvent> = {
  kind: 'group',
  machine: groupMachine,
  fold: deriveFold<GroupContext, GroupEvent>(groupMachine, { apply: applyGroupEvent }),
  eventTypes: GROUP_EVENT_TYPES,
  inQueue: false,
};

/** Templates live in partition `sys` (id = the template's name). */
export const templateAggregate: AggregateDefinition<TemplateContext, TemplateEvent> = {
  kind: 'template',
  machine: templateMachine,
  fold: templateFold,
  eventTypes: TEMPLATE_EVENT_TYPES,
  inQueue: false,
};

/** Schedules live in partition `sys` (id = the schedule's name); the sys leader's ticker fires them. */
export const scheduleAggregate: AggregateDefinition<ScheduleContext, ScheduleEvent> = {
  kind: 'schedule',
  machine: scheduleMachine,
  fold: scheduleFold,
  eventTypes: SCHEDULE_EVENT_TYPES,
  inQueue: false,
};

/** Every event of a non-job aggregate kind. */
export type AggregateEvent = QueueEvent | ReservationEvent | JobNodeEvent | GroupEvent | TemplateEvent | ScheduleEvent;

const DEFINITIONS: readonly AggregateDefinition<never, never>[] = [queueAggregate, reservationAggregate, jobNodeAggregate, groupAggregate, templateAggregate, scheduleAggregate] as unknown as AggregateDefinition<never, never>[];

const BY_KIND = new Map<string, AggregateDefinition>(DEFINITIONS.map((d) => [d.kind, d as unknown as AggregateDefinition]));
const BY_TYPE = new Map<string, AggregateDefinition>(DEFINITIONS.flatMap((d) => d.eventTypes.map((t) => [t, d as unknown as AggregateDefinition] as const)));

/** The definition of a kind, if it is one with a machine here. */
export function aggregateDefinition(kind: string): AggregateDefinition | undefined {
  return BY_KIND.get(kind);
}

/** Whether `event` is an event of a non-job kind this code folds (its type belongs to its kind). */
export function isAggregateEvent(event: Envelope): event is AggregateEvent {
  const definition = BY_TYPE.get(event.type);
  return definition !== undefined && definition.kind === event.aggregate.kind;
}

/** Every non-job event type. */
export const AGGREGATE_EVENT_TYPES: readonly string[] = [...BY_TYPE.keys()];

/** Folds one event of a non-job aggregate; null when its machine refuses it. */
export function evolveAggregate(state: FoldState<unknown>, event: AggregateEvent): FoldState<unknown> | null {
  return BY_TYPE.get(event.type)!.fold.step(state, event);
}

/** The state an aggregate of this kind starts in. */
export function initialAggregateState(kind: AggregateEvent['aggregate']['kind']): FoldState<unknown> {
  return BY_KIND.get(kind)!.fold.initialState;
}

/** What each event asks, as a person would say it, and the state it leads to ("already" for a repeat). */
const VERBS: Record<QueueEvent['type'] | ReservationEvent['type'] | JobNodeEvent['type'] | GroupEvent['type'], readonly [verb: string, leadsTo: string | null]> = {
  'queue.paused': ['pause', 'paused'],
  'queue.resumed': ['resume', 'active'],
  'queue.settings_changed': ['change the settings of', null],
  'queue.jobset_put': ['define the job set of', null],
  'queue.refreshed': ['refresh', null],
  'reservation.activated': ['reserve', 'active'],
  'reservation.renewed': ['renew', null],
  'reservation.released': ['release', 'idle'],
  'reservation.expired': ['expire', 'idle'],
  'jobnode.created': ['create', 'queued'],
  'jobnode.claimed': ['claim', 'running'],
  'jobnode.completed': ['complete', 'completed'],
  'jobnode.retrying': ['retry', 'retrying'],
  'jobnode.failed': ['fail', 'failed'],
  'jobnode.requeued': ['queue again', 'queued'],
  'jobnode.skipped': ['skip', 'skipped'],
  'jobnode.cancelled': ['cancel', 'cancelled'],
  'group.created': ['create', 'queued'],
  'group.started': ['start', 'running'],
  'group.ended': ['end', null],
};

/** Decides a candidate event by asking its kind's machine itself. */
export function decideAggregate(state: FoldState<unknown>, candidate: AggregateEvent): Decision<AggregateEvent> {
  // Templates and schedules say why in their own words (revisions, handled ticks).
  if (candidate.aggregate.kind === 'template') return decideTemplate(state as TemplateState, candidate as TemplateEvent);
  if (candidate.aggregate.kind === 'schedule') return decideSchedule(state as ScheduleState, candidate as ScheduleEvent);
  const definition = BY_TYPE.get(candidate.type)!;
  if (machineAccepts(definition.machine, state, candidate)) return { ok: true, event: candidate };
  const [verb, leadsTo] = VERBS[candidate.type as keyof typeof VERBS];
  const already = leadsTo === state.value ? 'already ' : '';
  const refers = candidate.aggregate.kind === 'reservation' ? `the reservation of queue ${candidate.aggregate.id}` : `${candidate.aggregate.kind} ${candidate.aggregate.id}`;
  return { ok: false, code: 'invalid_transition', reason: `cannot ${verb} ${refers}: it is ${already}${state.value}` };
}
