/**
 * Flow control, decided once: whether a queue may hand out a job now, and whether a job of a
 * given concurrency_key may run. Read by the queue's dispatcher (with its claims in flight) and by
 * `explain` and `progress` (which say what holds a waiting job). The inputs are folded from the
 * log (the queue's and its reservation's state, FlowCounts), so every node answers alike.
 */
import type { QueueContext, QueueSettings, RateLimit, ReservationContext } from '../../machines/index.js';
import type { FlowCounts } from '../projections/flow.js';
import type { AggregateStore } from '../store/aggregate-store.js';

export type HoldReason = 'paused' | 'reservation' | 'concurrency' | 'rate' | 'key_concurrency' | 'key_rate';

export interface Hold {
  readonly reason: HoldReason;
  /** When it lifts by itself (a rate window moving on, a reservation's expiry), in ms; absent: on an event. */
  readonly untilMs?: number;
  /** What a person needs to understand it: the pause's reason, the holder, the limit. */
  readonly detail: string;
}

/** What a held rate says: free again when the claim that fills the window leaves it. */
function rateHold(reason: 'rate' | 'key_rate', rate: RateLimit, inWindow: number, inFlight: number, nthLatest: (n: number) => number | undefined, of: string): Hold | null {
  if (inWindow + inFlight < rate.limit) return null;
  const leaving = nthLatest(rate.limit - inFlight);
  const hold = { reason, detail: `${of}: ${rate.limit} claims per ${rate.period_ms} ms reached` };
  return leaving === undefined ? hold : { ...hold, untilMs: leaving + rate.period_ms };
}

export class FlowGate {
  private inFlight = 0;
  private readonly inFlightByKey = new Map<string, number>();

  constructor(
    readonly queue: string,
    private readonly aggregates: AggregateStore,
    private readonly counts: FlowCounts,
  ) {}

  settings(): QueueSettings {
    return this.aggregates.stateOf<QueueContext>('queue', this.queue).context.settings;
  }

  /** What holds the whole queue now, if anything. */
  queueHold(nowMs: number): Hold | null {
    const queue = this.aggregates.stateOf<QueueContext>('queue', this.queue);
    if (queue.value === 'paused') return { reason: 'paused', detail: `queue ${this.queue} is paused${queue.context.paused_reason ? `: ${queue.context.paused_reason}` : ''} (by ${queue.context.paused_by ?? 'unknown'} at ${queue.context.paused_at ?? '?'})` };
    const reservation = this.aggregates.stateOf<ReservationContext>('reservation', this.queue);
    if (reservation.value === 'active') {
      const { holder, expires_at, reservation_id } = reservation.context;
      return { reason: 'reservation', untilMs: Date.parse(expires_at ?? ''), detail: `queue ${this.queue} is reserved by ${holder ?? '?'} (${reservation_id ?? '?'}) until ${expires_at ?? '?'}` };
    }
    const { concurrency, rate } = queue.context.settings;
    if (concurrency !== null && this.counts.running(this.queue) + this.inFlight >= concurrency) {
      return { reason: 'concurrency', detail: `queue ${this.queue}: ${concurrency} running at once reached` };
    }
    if (rate !== null) {
      const inWindow = this.counts.claimsSince(this.queue, nowMs - rate.period_ms + 1);
      return rateHold('rate', rate, inWindow, this.inFlight, (n) => this.counts.nthLatestClaim(this.queue, n), `queue ${this.queue}`);
    }
    return null;
  }

  /** How many more jobs the queue may hand out now (before keys); 0 when held. */
  room(nowMs: number): number {
    if (this.queueHold(nowMs) !== null) return 0;
    const { concurrency, rate } = this.settings();
    let room = Number.POSITIVE_INFINITY;
    if (concurrency !== null) room = concurrency - this.counts.running(this.queue) - this.inFlight;
    if (rate !== null) room = Math.min(room, rate.limit - this.counts.claimsSince(this.queue, nowMs - rate.period_ms + 1) - this.inFlight);
    return room;
  }

  /** What holds jobs of this concurrency key now, if anything (the queue itself aside). */
  keyHold(key: string | null, nowMs: number): Hold | null {
    if (key === null) return null;
    const { key_concurrency, key_rate } = this.settings();
    const inFlight = this.inFlightByKey.get(key) ?? 0;
    if (key_concurrency !== null && this.counts.runningOfKey(this.queue, key) + inFlight >= key_concurrency) {
      return { reason: 'key_concurrency', detail: `key ${key}: ${key_concurrency} running at once reached` };
    }
    if (key_rate !== null) {
      const inWindow = this.counts.keyClaimsSince(this.queue, key, nowMs - key_rate.period_ms + 1);
      return rateHold('key_rate', key_rate, inWindow, inFlight, (n) => this.counts.nthLatestKeyClaim(this.queue, key, n), `key ${key}`);
    }
    return null;
  }

  /** A claim of a job with this key is in flight: it counts as running and as claimed until settled. */
  taking(key: string | null): void {
    this.inFlight += 1;
    if (key !== null) this.inFlightByKey.set(key, (this.inFlightByKey.get(key) ?? 0) + 1);
  }

  /** The claim landed (the store counts it now) or was refused. */
  settled(key: string | null): void {
    this.inFlight -= 1;
    if (key === null) return;
    const left = (this.inFlightByKey.get(key) ?? 1) - 1;
    if (left === 0) this.inFlightByKey.delete(key);
    else this.inFlightByKey.set(key, left);
  }
}
