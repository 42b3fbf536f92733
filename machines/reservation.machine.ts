/**
 * The Reservation machine (kind `reservation`, id = the queue's name: one slot per queue, seed 002
 * §2.5): `idle` -> `active` (reservation id, holder, expiry) -> `idle` by release or expiry. Each
 * activation keeps its own id, so the log shows every reservation's history. Pure.
 */
import { assign, setup } from 'xstate';
import type { Envelope } from './envelope.js';

export interface ReservationActivatedData {
  readonly reservation_id: string;
  readonly holder: string;
  /** ISO-8601: the leader expires it then unless renewed. */
  readonly expires_at: string;
  /** The job created and claimed under it (direct execution), if any. */
  readonly job_id: string | null;
}

export type ReservationEvent =
  | Envelope<'reservation.activated', ReservationActivatedData>
  | Envelope<'reservation.renewed', { readonly reservation_id: string; readonly expires_at: string }>
  | Envelope<'reservation.released', { readonly reservation_id: string }>
  | Envelope<'reservation.expired', { readonly reservation_id: string }>;

export const RESERVATION_EVENT_TYPES = ['reservation.activated', 'reservation.renewed', 'reservation.released', 'reservation.expired'] as const satisfies readonly ReservationEvent['type'][];

export type ReservationStatus = 'idle' | 'active';

export interface ReservationContext {
  readonly reservation_id: string | null;
  readonly holder: string | null;
  readonly expires_at: string | null;
  readonly job_id: string | null;
  readonly activated_at: string | null;
}

export const NO_RESERVATION: ReservationContext = { reservation_id: null, holder: null, expires_at: null, job_id: null, activated_at: null };

export function applyReservationEvent(context: ReservationContext, event: ReservationEvent): ReservationContext {
  switch (event.type) {
    case 'reservation.activated':
      return { ...event.data, activated_at: event.time };
    case 'reservation.renewed':
      return { ...context, expires_at: event.data.expires_at };
    case 'reservation.released':
    case 'reservation.expired':
      return NO_RESERVATION;
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

type GuardArgs = { context: ReservationContext; event: ReservationEvent };

export const reservationGuards = {
  /** Renew, release and expire name the active reservation: an old id is stale. */
  namesActive: ({ context, event }: GuardArgs) => 'reservation_id' in event.data && event.data.reservation_id === context.reservation_id,
  /** Expiry comes at or after expires_at, never before (the audit relies on it). */
  namesActiveAndDue: ({ context, event }: GuardArgs) =>
    'reservation_id' in event.data && event.data.reservation_id === context.reservation_id && context.expires_at !== null && Date.parse(event.time) >= Date.parse(context.expires_at),
};

export const reservationMachine = setup({
  types: { context: {} as ReservationContext, events: {} as ReservationEvent },
  guards: reservationGuards,
  actions: { apply: assign(({ context, event }) => applyReservationEvent(context, event)) },
}).createMachine({
  id: 'reservation',
  initial: 'idle',
  context: NO_RESERVATION,
  states: {
    idle: {
      description: 'The queue dispatches normally.',
      on: { 'reservation.activated': { target: 'active', actions: 'apply' } },
    },
    active: {
      description: 'The dispatcher hands out no queued job of the queue (only the reserved job runs).',
      on: {
        'reservation.renewed': { guard: 'namesActive', target: 'active', actions: 'apply' },
        'reservation.released': { guard: 'namesActive', target: 'idle', actions: 'apply' },
        'reservation.expired': { guard: 'namesActiveAndDue', target: 'idle', actions: 'apply' },
      },
    },
  },
});
