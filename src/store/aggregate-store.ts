/**
 * Every non-job aggregate's current state (queues, reservations, and the kinds machines/aggregates.ts
 * lists), folded from the log with the fast folds derived from their machines. Like the JobStore
 * it holds committed events only and is idempotent by the event's position.
 */
import { evolveAggregate, initialAggregateState, type AggregateEvent, type AggregateKind, type FoldState, type Position } from '../../machines/index.js';
import type { ApplyResult, HistoryEntry } from './job-store.js';

/** How many recent events an aggregate keeps in memory (a resent command finds its own among them); the log keeps all. */
export const AGGREGATE_HISTORY_KEPT = 100;

export interface AggregateRecord<C = unknown> {
  readonly kind: AggregateKind;
  readonly id: string;
  /** The queue of a queue-partition aggregate; null for a `sys` one. */
  readonly queue: string | null;
  readonly state: FoldState<C>;
  /** Position of its last event. */
  readonly seq: Position;
  /** Its most recent events, oldest first (at most AGGREGATE_HISTORY_KEPT). */
  readonly history: readonly HistoryEntry<string>[];
}

export interface AggregateChange {
  readonly before: AggregateRecord | undefined;
  readonly after: AggregateRecord;
  /** The event that made the change; undefined when restored from a checkpoint. */
  readonly event: AggregateEvent | undefined;
}

export type AggregateChangeListener = (change: AggregateChange) => void;

export function aggregateKey(kind: AggregateKind, id: string): string {
  return `${kind}/${id}`;
}

export class AggregateStore {
  private readonly records = new Map<string, AggregateRecord>();
  private readonly listeners: AggregateChangeListener[] = [];
  refused = 0;

  get<C>(kind: AggregateKind, id: string): AggregateRecord<C> | undefined {
    return this.records.get(aggregateKey(kind, id)) as AggregateRecord<C> | undefined;
  }

  /** The current state of an aggregate: its initial state when the log holds none of its events. */
  stateOf<C>(kind: AggregateEvent['aggregate']['kind'], id: string): FoldState<C> {
    return (this.get<C>(kind, id)?.state ?? initialAggregateState(kind)) as FoldState<C>;
  }

  values(): IterableIterator<AggregateRecord> {
    return this.records.values();
  }

  get size(): number {
    return this.records.size;
  }

  onChange(listener: AggregateChangeListener): void {
    this.listeners.push(listener);
  }

  apply(seq: Position, event: AggregateEvent): ApplyResult {
    const key = aggregateKey(event.aggregate.kind, event.aggregate.id);
    const before = this.records.get(key);
    if (before && seq <= before.seq) return 'already_applied';
    const state = evolveAggregate(before?.state ?? initialAggregateState(event.aggregate.kind), event);
    if (state === null) {
      this.refused += 1;
      return 'refused';
    }
    const base = { seq, id: event.id, type: event.type, time: event.time };
    const entry: HistoryEntry<string> = event.meta.command_hash === undefined ? base : { ...base, commandHash: event.meta.command_hash };
    const history = before ? [...before.history.slice(-(AGGREGATE_HISTORY_KEPT - 1)), entry] : [entry];
    const after: AggregateRecord = { kind: event.aggregate.kind, id: event.aggregate.id, queue: event.queue ?? null, state, seq, history };
    this.records.set(key, after);
    const change: AggregateChange = { before, after, event };
    for (const listener of this.listeners) listener(change);
    return 'applied';
  }

  /** Puts a record back as a checkpoint stored it. */
  restore(record: AggregateRecord): void {
    const key = aggregateKey(record.kind, record.id);
    const before = this.records.get(key);
    this.records.set(key, record);
    const change: AggregateChange = { before, after: record, event: undefined };
    for (const listener of this.listeners) listener(change);
  }
}
