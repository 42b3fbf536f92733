/**
 * Reservation expiry (leader only): an active reservation of a queue this node leads is expired
 * at its `expires_at` (`reservation.expired`), also one found active on start or takeover (seed
 * 002 §4.3: a stale reservation at recovery). The machine refuses an expiry before `expires_at`
 * and one naming a reservation no longer active, so a renew or release racing it is decided there.
 */
import type { ReservationContext } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { aggregateEnvelope, transitionAggregate, type CommandContext } from '../commands/handle-command.js';
import { DocketError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { AggregateChange } from '../store/aggregate-store.js';

/** Between tries of an expiry that failed (the writer not serving yet, a commit refused). */
const RETRY_MS = 200;

export class ReservationExpirer {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private unsubscribeClock: (() => void) | undefined;

  constructor(
    private readonly ctx: CommandContext,
    private readonly isLeader: (queue: string) => boolean,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  start(): void {
    // A test's clock moved forward: what is due now expires now.
    this.unsubscribeClock = this.clock.onChange?.(() => {
      for (const queue of [...this.timers.keys()]) this.arm(queue);
    });
  }

  stop(): void {
    this.unsubscribeClock?.();
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  readonly apply = (change: AggregateChange): void => {
    if (change.after.kind !== 'reservation' || change.after.queue === null || !this.isLeader(change.after.queue)) return;
    this.arm(change.after.queue);
  };

  /** On start or takeover, once the partition is folded: every active reservation gets its timer. */
  adopt(queue: string): void {
    this.arm(queue);
  }

  drop(queue: string): void {
    clearTimeout(this.timers.get(queue));
    this.timers.delete(queue);
  }

  /** `minDelayMs`: after a failed expiry, so a leader that cannot write yet does not spin. */
  private arm(queue: string, minDelayMs = 0): void {
    this.drop(queue);
    const state = this.ctx.aggregates.stateOf<ReservationContext>('reservation', queue);
    if (state.value !== 'active' || state.context.expires_at === null || state.context.reservation_id === null) return;
    const reservationId = state.context.reservation_id;
    const dueIn = Date.parse(state.context.expires_at) - this.clock.now();
    const timer = setTimeout(() => {
      this.timers.delete(queue);
      void this.expire(queue, reservationId);
    }, Math.max(minDelayMs, dueIn));
    timer.unref();
    this.timers.set(queue, timer);
  }

  private async expire(queue: string, reservationId: string): Promise<void> {
    if (!this.isLeader(queue)) return;
    const ref = { kind: 'reservation' as const, id: queue, queue };
    try {
      await transitionAggregate<ReservationContext>(this.ctx, ref, undefined, (_state, eventId) => aggregateEnvelope(this.ctx, 'reservation.expired', ref, eventId, { reservation_id: reservationId }));
      this.log.info({ queue, reservation_id: reservationId }, 'reservation expired');
    } catch (err) {
      // Renewed or released meanwhile (the machine refused), or the queue changed hands: the
      // new state re-arms the timer through `apply`, or the new leader adopts it.
      if (!(err instanceof DocketError)) this.log.error({ err, queue }, 'expiring a reservation failed');
      else if (this.isLeader(queue)) this.arm(queue, RETRY_MS);
    }
  }
}
