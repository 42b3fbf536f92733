/**
 * DESIGN's event and commit shapes (log v2). A stored message of `DOCKET` is one commit: an
 * ordered list of events of one partition. The machines read time and ids from the events and
 * never from a clock or a generator of their own.
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** Every aggregate kind the log knows (DESIGN: "Kinds"). */
export const AGGREGATE_KINDS = ['job', 'queue', 'reservation', 'jobnode', 'template', 'schedule', 'group'] as const;
export type AggregateKind = (typeof AGGREGATE_KINDS)[number];

export interface AggregateRef {
  readonly kind: AggregateKind;
  readonly id: string;
}

export interface EventMeta {
  /** The node that decided the event. */
  readonly node: string;
  /** The command that asked for it, when the client sent an id. */
  readonly command_id?: string;
  /** Hash of that command's body: a reused command id with another body is a conflict. */
  readonly command_hash?: string;
  readonly correlation_id?: string;
  readonly causation_id?: string;
  readonly actor?: string;
}

export interface Envelope<TType extends string = string, TData = unknown> {
  /** Unique event id (derived from the command id where there is one). */
  readonly id: string;
  readonly type: TType;
  /** ISO-8601 time the event was decided, from the node's injected clock. */
  readonly time: string;
  readonly aggregate: AggregateRef;
  /** The queue of a queue-partition aggregate. */
  readonly queue?: string;
  readonly data: TData;
  readonly meta: EventMeta;
}

/**
 * The commit format version this code writes. 3 is 2 with each `job.submitted` stored without the
 * fields that hold what their absence means (machines/job.events.ts SubmittedAbsent): a node
 * that reads only 2 refuses such a commit by its version instead of folding submits with those
 * fields missing. Both are read (READ_COMMIT_VERSIONS).
 */
export const COMMIT_VERSION = 3 as const;
/** The commit format versions this code reads. */
export const READ_COMMIT_VERSIONS = [2, 3] as const;
export type CommitVersion = (typeof READ_COMMIT_VERSIONS)[number];

export interface CommitWriter {
  readonly node: string;
  /** The writer's lease epoch: never goes back within a partition. */
  readonly epoch: number;
}

/** One stored message of DOCKET. */
export interface Commit<E extends Envelope = Envelope> {
  readonly v: CommitVersion;
  /** Unique per writer (node, epoch, counter); the append's Nats-Msg-Id. */
  readonly commit: string;
  /** `q.<queue>` or `sys`. */
  readonly partition: string;
  readonly writer: CommitWriter;
  /** SHA-256 (hex) of the partition's previous commit payload as stored; null for its first. */
  readonly prev_hash: string | null;
  readonly events: readonly E[];
}

/**
 * An event's position is (stream sequence of its commit, index in the commit): one total order
 * over the whole log. In memory it is one number, `seq * POSITION_SPAN + index`, which orders
 * the same way and stays an exact integer up to sequence 2^37. A commit holds fewer than
 * POSITION_SPAN events (the writer caps it far below).
 */
export const POSITION_SPAN = 65_536;
export type Position = number;

export function positionOf(seq: number, index: number): Position {
  return seq * POSITION_SPAN + index;
}

export function commitSeqOf(position: Position): number {
  return Math.floor(position / POSITION_SPAN);
}

export function indexOf(position: Position): number {
  return position % POSITION_SPAN;
}
