/**
 * Read-side answers about flow control: a queue's own state (`queue.show`), the active
 * reservations, and what holds a waiting job. Any node answers from its folded state; the leader's
 * claims in flight are not counted here (a moment's difference at most).
 */
import type { QueueContext, ReservationContext } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { FlowGate, type Hold, type HoldReason } from '../dispatch/flow-gate.js';
import type { FlowCounts } from '../projections/flow.js';
import type { QueueOrder } from '../projections/queue-order.js';
import type { AggregateStore } from '../store/aggregate-store.js';
import type { JobRecord, JobStore } from '../store/job-store.js';
import type { QueueShowCommand, ReservationsCommand } from './queue-schemas.js';
import { queueViewOf, type QueueView } from './queue-commands.js';
import { reservationViewOf, type ReservationView } from './reservation-commands.js';

/** Ready jobs `queue.show` looks at to count the ones a key limit holds: beyond it the count says `at_least`. */
const MAX_READY_SCANNED = 10_000;

export interface FlowViewContext {
  readonly store: JobStore;
  readonly aggregates: AggregateStore;
  readonly counts: FlowCounts;
  readonly queueOrder: Pick<QueueOrder, 'snapshot'>;
  readonly clock: Clock;
}

export type HoldView = {
  readonly reason: HoldReason;
  readonly detail: string;
  readonly until?: string;
};

function holdView(hold: Hold): HoldView {
  return hold.untilMs === undefined || !Number.isFinite(hold.untilMs) ? { reason: hold.reason, detail: hold.detail } : { reason: hold.reason, detail: hold.detail, until: new Date(hold.untilMs).toISOString() };
}

export type QueueShow = QueueView & {
  readonly reservation: ReservationView | null;
  readonly running: number;
  /** What holds the whole queue now, if anything. */
  readonly held: HoldView | null;
  /** Ready jobs held back, by what holds them. */
  readonly waiting_by_reason: Partial<Record<HoldReason, number>>;
  /** true when more ready jobs wait than were looked at: the counts are lower bounds. */
  readonly waiting_truncated?: true;
};

/** What `progress` says of a queue's flow: paused or not, what holds it, its held ready jobs by reason. */
export type FlowSummary = {
  readonly status: 'active' | 'paused';
  readonly held: HoldView | null;
  readonly waiting_by_reason: Partial<Record<HoldReason, number>>;
  readonly waiting_truncated?: true;
};

export function flowSummary(ctx: FlowViewContext, queue: string): FlowSummary {
  const now = ctx.clock.now();
  const gate = new FlowGate(queue, ctx.aggregates, ctx.counts);
  const held = gate.queueHold(now);
  const status = ctx.aggregates.stateOf<QueueContext>('queue', queue).value === 'paused' ? 'paused' : 'active';
  const { key_concurrency, key_rate } = gate.settings();
  const waiting: Partial<Record<HoldReason, number>> = {};
  // Without key limits and with nothing holding the queue, nothing waits on flow control: no scan.
  if (held === null && key_concurrency === null && key_rate === null) return { status, held: null, waiting_by_reason: waiting };
  const { ready } = ctx.queueOrder.snapshot(queue);
  if (held !== null) {
    if (ready.length > 0) waiting[held.reason] = ready.length;
    return { status, held: holdView(held), waiting_by_reason: waiting };
  }
  for (const jobId of ready.slice(0, MAX_READY_SCANNED)) {
    const hold = gate.keyHold(ctx.store.get(jobId)?.state.job.context.concurrency_key ?? null, now);
    if (hold !== null) waiting[hold.reason] = (waiting[hold.reason] ?? 0) + 1;
  }
  return { status, held: null, waiting_by_reason: waiting, ...(ready.length > MAX_READY_SCANNED ? { waiting_truncated: true as const } : {}) };
}

export function showQueue(ctx: FlowViewContext, command: QueueShowCommand): QueueShow {
  const { queue } = command;
  const { status: _status, ...flow } = flowSummary(ctx, queue);
  return {
    ...queueViewOf(queue, ctx.aggregates.get<QueueContext>('queue', queue)),
    reservation: reservationViewOf(queue, ctx.aggregates.stateOf<ReservationContext>('reservation', queue)),
    running: ctx.counts.running(queue),
    ...flow,
  };
}

export function listReservations(ctx: FlowViewContext, command: ReservationsCommand): { reservations: ReservationView[] } {
  const reservations: ReservationView[] = [];
  for (const record of ctx.aggregates.values()) {
    if (record.kind !== 'reservation' || record.queue === null) continue;
    if (command.queue !== undefined && record.queue !== command.queue) continue;
    const view = reservationViewOf(record.queue, record.state as never);
    if (view) reservations.push(view);
  }
  return { reservations: reservations.sort((a, b) => (a.queue < b.queue ? -1 : 1)) };
}

/** What holds a queued, due job now (the queue, then its key); null when nothing does or it is not waiting. */
export function holdOf(ctx: FlowViewContext, record: JobRecord): HoldView | null {
  if (record.state.job.value !== 'queued' || Date.parse(record.state.job.context.run_at) > ctx.clock.now()) return null;
  const gate = new FlowGate(record.queue, ctx.aggregates, ctx.counts);
  const now = ctx.clock.now();
  const hold = gate.queueHold(now) ?? gate.keyHold(record.state.job.context.concurrency_key, now);
  return hold === null ? null : holdView(hold);
}
