/**
 * The reservation's commands (seed 002 §2.5, direct execution), run on the queue's leader:
 * reserve (optionally with a job created and claimed under it in the same commit), renew and
 * release. While a reservation is active the dispatcher hands out no queued job of its queue
 * (src/dispatch/flow-gate.ts); the leader expires it at `expires_at` (src/reactors/reservations.ts).
 */
import { hostname } from 'node:os';
import { decideAggregate, decideJob, evolveAggregate, evolveJob, INITIAL_JOB_STATE, type AggregateEvent, type FoldState, type JobEvent, type ReservationContext } from '../../machines/index.js';
import { toIso } from '../clock.js';
import { ConflictError, InvalidRequestError, InvalidTransitionError, NotFoundError } from '../errors.js';
import { commandJobId, eventIdFor, eventIdOf, queueOfReservationId, reservationId } from '../ids.js';
import type { AggregateRecord } from '../store/aggregate-store.js';
import { aggregateEnvelope, assertSameCommand, commandMetaOf, envelope, transitionAggregate, type CommandContext } from './handle-command.js';
import { JobDefaults } from './limits.js';
import type { ReleaseCommand, RenewCommand, ReserveCommand } from './queue-schemas.js';
import type { ClaimedJob } from './schemas.js';
import { submittedEvent } from './submit.js';
import { applyTemplate } from '../schedules/template-submit.js';

export type ReservationView = {
  readonly queue: string;
  readonly reservation_id: string;
  readonly holder: string;
  readonly expires_at: string;
  readonly activated_at: string;
  readonly job_id: string | null;
};

export function reservationViewOf(queue: string, state: FoldState<ReservationContext>): ReservationView | null {
  const c = state.context;
  if (state.value !== 'active' || c.reservation_id === null) return null;
  return { queue, reservation_id: c.reservation_id, holder: c.holder ?? '', expires_at: c.expires_at ?? '', activated_at: c.activated_at ?? '', job_id: c.job_id };
}

const ref = (queue: string) => ({ kind: 'reservation' as const, id: queue, queue });

/** The queue a reservation id belongs to; invalid_request when the id is not a reservation's. */
export function queueOfReservation(id: string): string {
  const queue = queueOfReservationId(id);
  if (queue === null) throw new InvalidRequestError(`${id} is not a reservation id (reserve returns one)`, { details: { reservation_id: id } });
  return queue;
}

/** Decides events one after another on the same aggregate, each on the state the one before left. */
function decideInOrder(state: FoldState<unknown>, events: readonly AggregateEvent[]): void {
  let current = state;
  for (const event of events) {
    const decision = decideAggregate(current, event);
    if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { queue: event.aggregate.id } });
    current = evolveAggregate(current, event)!;
  }
}

export type Reserved = ReservationView & {
  readonly job?: ClaimedJob;
  readonly replayed: boolean;
};

export async function reserve(ctx: CommandContext, command: ReserveCommand): Promise<Reserved> {
  const { queue } = command;
  if (command.job?.key !== undefined) throw new InvalidRequestError('a direct job takes no key: submit keyed jobs to the queue', { details: { queue } });
  if (command.job?.fan_out !== undefined) throw new InvalidRequestError('a direct job takes no fan_out: submit fan-out jobs to the queue', { details: { queue } });
  const meta = commandMetaOf(command.id, command);
  const id = reservationId(queue, command.id, ctx.ids);
  const activatedId = command.id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(command.id, `reservation-${queue}`);
  const writer = await ctx.writer(queue);
  while (writer.isBusy(queue, 'reservation')) await writer.settled(queue, 'reservation');

  const record: AggregateRecord<ReservationContext> | undefined = ctx.aggregates.get<ReservationContext>('reservation', queue);
  const state = ctx.aggregates.stateOf<ReservationContext>('reservation', queue);
  // A resent reserve: its activation is in the history; answer with the reservation as it is.
  const earlier = record?.history.find((h) => h.id === activatedId);
  if (earlier) {
    assertSameCommand(earlier.commandHash, meta);
    const view = reservationViewOf(queue, state);
    if (view === null || view.reservation_id !== id) throw new ConflictError(`reservation ${id} is no longer active`, { details: { reservation_id: id } });
    return { ...view, replayed: true };
  }

  const now = ctx.clock.now();
  const events: (AggregateEvent | JobEvent)[] = [];
  const reservationEvents: AggregateEvent[] = [];
  if (state.value === 'active') {
    const expiresAt = Date.parse(state.context.expires_at ?? '');
    if (!(now >= expiresAt)) {
      throw new ConflictError(`queue ${queue} is reserved by ${state.context.holder ?? '?'} until ${state.context.expires_at ?? '?'}`, {
        details: { queue, holder: state.context.holder, expires_at: state.context.expires_at, reservation_id: state.context.reservation_id },
      });
    }
    // Past its expiry, not yet expired by the reactor: expired in the same commit (seed 002 §4.3).
    reservationEvents.push(aggregateEnvelope(ctx, 'reservation.expired', ref(queue), eventIdOf(ctx.ids.next()), { reservation_id: state.context.reservation_id! }));
  }
  const expiresAt = toIso(now + command.ttl_ms);
  const jobId = command.job === undefined ? null : command.id === undefined ? ctx.ids.next() : commandJobId(queue, command.id, 0);
  // The activation comes first in the commit: by the time the job is folded the queue is held,
  // so the dispatcher never sees the direct job as free to hand out.
  reservationEvents.push(aggregateEnvelope(ctx, 'reservation.activated', ref(queue), activatedId, { reservation_id: id, holder: command.holder, expires_at: expiresAt, job_id: jobId }, meta));
  decideInOrder(state, reservationEvents);
  events.push(...reservationEvents);

  let claimed: ClaimedJob | undefined;
  if (command.job !== undefined && jobId !== null) {
    if (ctx.store.has(jobId)) throw new ConflictError(`job ${jobId} exists already; send a new command id`, { details: { job_id: jobId } });
    // A direct job may name a template too (its queue must still be the reserved one).
    const made = applyTemplate(command.job, ctx.aggregates);
    const submitted = submittedEvent(ctx, made.spec, jobId, command.id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(command.id, jobId), meta, false, made.madeFrom);
    const runId = ctx.ids.next();
    const leaseMs = command.lease_ms ?? JobDefaults.leaseMs;
    const claim = envelope(ctx, 'job.claimed', { queue, jobId }, command.id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(command.id, jobId, 1), {
      run_id: runId,
      worker: command.holder,
      host: hostname(),
      pid: 0,
      version: 'direct',
      lease_ms: leaseMs,
    });
    // A delayed direct job would be refused by the machine at its claim: it runs now or not at all.
    let job = INITIAL_JOB_STATE;
    for (const event of [submitted, claim]) {
      const decision = decideJob(job, event);
      if (!decision.ok) throw new InvalidRequestError(`the direct job cannot start now: ${decision.reason}`, { details: { job_id: jobId } });
      job = evolveJob(job, event)!;
    }
    events.push(submitted, claim);
    const c = job.job.context;
    claimed = { job_id: jobId, run_id: runId, queue, key: null, params: c.params, attempt: c.attempt, max_attempts: c.max_attempts, lease_ms: leaseMs, fencing_token: 0 };
  }
  const positions = await writer.append(events);
  const view = reservationViewOf(queue, ctx.aggregates.stateOf<ReservationContext>('reservation', queue))!;
  // The claim's position is the run's fencing token, as for any claim.
  return { ...view, replayed: false, ...(claimed ? { job: { ...claimed, fencing_token: positions[positions.length - 1]! } } : {}) };
}

/** The active reservation of the id's queue, or not_found naming what is active instead. */
function assertActive(ctx: CommandContext, reservationId: string, state: FoldState<ReservationContext>): void {
  if (state.value === 'active' && state.context.reservation_id === reservationId) return;
  throw new NotFoundError(`reservation ${reservationId} is not active (released, expired, or never made)`, { details: { reservation_id: reservationId } });
}

export async function release(ctx: CommandContext, command: ReleaseCommand): Promise<{ reservation_id: string; queue: string; released: true; replayed: boolean }> {
  const queue = queueOfReservation(command.reservation_id);
  const { replayed } = await transitionAggregate<ReservationContext>(ctx, ref(queue), command.id, (state, eventId) => {
    const event = aggregateEnvelope(ctx, 'reservation.released', ref(queue), eventId, { reservation_id: command.reservation_id }, commandMetaOf(command.id, command));
    // A resend finds its event before deciding; a first send must name the active reservation.
    if (!ctx.aggregates.get('reservation', queue)?.history.some((h) => h.id === eventId)) assertActive(ctx, command.reservation_id, state);
    return event;
  });
  return { reservation_id: command.reservation_id, queue, released: true, replayed };
}

export async function renew(ctx: CommandContext, command: RenewCommand): Promise<ReservationView & { replayed: boolean }> {
  const queue = queueOfReservation(command.reservation_id);
  const { record, replayed } = await transitionAggregate<ReservationContext>(ctx, ref(queue), command.id, (state, eventId) => {
    const event = aggregateEnvelope(ctx, 'reservation.renewed', ref(queue), eventId, { reservation_id: command.reservation_id, expires_at: toIso(ctx.clock.now() + command.ttl_ms) }, commandMetaOf(command.id, command));
    if (!ctx.aggregates.get('reservation', queue)?.history.some((h) => h.id === eventId)) assertActive(ctx, command.reservation_id, state);
    return event;
  });
  const view = reservationViewOf(queue, record.state);
  if (view === null) throw new NotFoundError(`reservation ${command.reservation_id} is not active`, { details: { reservation_id: command.reservation_id } });
  return { ...view, replayed };
}
