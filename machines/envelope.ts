/**
 * DESIGN's event envelope. Every event on `docket.evt.>` has this shape; the machines read
 * time and ids from it and never from a clock or a generator of their own.
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface EventMeta {
  /** The node that appended the event. */
  readonly node: string;
  readonly correlation_id?: string;
  readonly causation_id?: string;
  readonly actor?: string;
}

export interface Envelope<TType extends string = string, TData = unknown> {
  readonly v: 1;
  /** Unique event id; also the `Nats-Msg-Id` of its append (derived from the command id). */
  readonly id: string;
  readonly type: TType;
  /** ISO-8601 time the event was decided, from the node's injected clock. */
  readonly time: string;
  readonly queue?: string;
  readonly data: TData;
  readonly meta: EventMeta;
}

/** The envelope version this code writes; older ones are upcast in src/nats/codec.ts. */
export const ENVELOPE_VERSION = 1 as const;
