/**
 * The one writer of a partition (DESIGN: "Group commit"), on the node that leads it. Events the
 * leader decided join the partition's next commit; at most one commit is in flight, and
 * everything decided while it flies goes into the next one, so the per-message cost of NATS is
 * paid once per commit, not once per event. A commit appends with the expected last subject
 * sequence of the partition's previous commit: a deposed writer's append is refused by the server.
 *
 * Decisions are made against committed state only. An aggregate with events waiting in this
 * writer is busy: the next decision on it waits for that commit (`settled`), so no decision ever
 * rests on an event that might not be stored, and a failed commit needs no rollback, only
 * answers. Events are applied (store, tail, live events) by `onCommitted` after the ack.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { COMMIT_VERSION, positionOf, type AggregateKind, type Commit, type Envelope, type Position } from '../../machines/index.js';
import { InvalidRequestError, UnavailableError } from '../errors.js';
import type { Logger } from '../logger.js';
import { commitHash, decodeCommit, encodeEvent } from '../nats/codec.js';
import { MSG_ID_HEADER, STREAM, subjects } from '../nats/subjects.js';
import { AppendConflictError, type EventStore } from './event-store.js';

/** A commit's bounds: well under the server's default max payload (1 MiB) with its headers. */
export const COMMIT_LIMITS = { maxEvents: 4_096, maxBytes: 900 * 1024 } as const;

/** The partition's last commit as this writer knows it. */
export interface PartitionTip {
  /** Stream sequence of the partition's last commit; 0 when it has none. */
  readonly seq: number;
  /** commitHash of that commit's payload; null when it has none. */
  readonly hash: string | null;
  /** The epoch its writer held the partition under; 0 when it has none. */
  readonly epoch: number;
}

/** A commit the stream acknowledged, handed to the node to fold and announce. */
export interface CommittedCommit {
  readonly seq: number;
  readonly commit: Commit;
  /** The commit as stored. */
  readonly payload: Uint8Array;
  /** Where each event's JSON starts in the payload (it ends where the next one's comma is, or the events' list ends): live events per event without a second stringify. */
  readonly eventStarts: Uint32Array;
  /** Each event's JSON length in bytes. */
  readonly eventSizes: readonly number[];
}

interface Item {
  readonly events: readonly Envelope[];
  /**
   * The events' JSON, joined by commas, as bytes: held off V8's heap while the item waits for
   * its commit. Held as strings, the JSON outlived the young generation in a bulk submit and was
   * half of what reached the old space as garbage (94 of 200 MB for 200,000 jobs).
   */
  readonly json: Buffer;
  /** Each event's JSON length in bytes. */
  readonly sizes: readonly number[];
  /** The bytes it adds to a commit (each event with a comma). */
  readonly bytes: number;
  readonly resolve: (positions: Position[]) => void;
  readonly reject: (err: Error) => void;
}

interface Busy {
  count: number;
  /** Made by the first `settled` call: most busy aggregates are never waited for. */
  waiters: (() => void)[] | undefined;
}

/** Jobs by id (their ids never contain '/'), other kinds by kind and id. */
function busyKey(kind: AggregateKind, id: string): string {
  return kind === 'job' ? id : `${kind}/${id}`;
}

export interface PartitionWriterOptions {
  readonly partition: string;
  readonly node: string;
  /** The lease epoch this writer holds the partition under. */
  readonly epoch: number;
  readonly tip: PartitionTip;
  /** Folds an acknowledged commit into this node (store, tail position, live events). */
  readonly onCommitted: (committed: CommittedCommit) => void;
  /** Waits until this node has folded the log up to `seq` (after a foreign commit). */
  readonly refoldTo: (seq: number) => Promise<void>;
  /** The partition has a writer of a later epoch: this one stepped down for good. */
  readonly onDeposed?: () => void;
  /** Runs a flush at the end of this turn (the node's outbox, so a commit shares its socket write). @defaultValue setImmediate */
  readonly atEndOfTurn?: (task: () => void) => void;
  readonly log: Logger;
}

/** Reads a partition's last commit from the stream leader. */
export async function readPartitionTip(jsm: JetStreamManager, partition: string): Promise<PartitionTip & { msgId: string | null }> {
  const m = await jsm.streams.getMessage(STREAM, { last_by_subj: subjects.partition(partition) });
  if (!m) return { seq: 0, hash: null, epoch: 0, msgId: null };
  return { seq: m.seq, hash: commitHash(m.data), epoch: epochOf(m.data), msgId: m.header?.get(MSG_ID_HEADER) ?? null };
}

/** The writer epoch of a stored commit; 0 for one that cannot be read (the audit names it). */
function epochOf(payload: Uint8Array): number {
  try {
    return decodeCommit(payload).writer.epoch;
  } catch {
    return 0;
  }
}

/** What a commit's events may take: its max bytes less room for the commit's own fields. */
const EVENTS_MAX_BYTES = COMMIT_LIMITS.maxBytes - 1024;

/** An event's bytes in a commit: its JSON and the comma that separates it from the next. */
function inCommit(size: number): number {
  return size + 1;
}

/** Each event's JSON length in bytes, not characters: a commit fits the max payload whatever the params hold. */
function byteLengths(json: readonly string[]): number[] {
  return json.map((j) => Buffer.byteLength(j));
}

const EVENTS_END = Buffer.from(']}');
const COMMA = Buffer.from(',');
const COMMA_BYTE = COMMA[0]!;

/**
 * Events' JSON (with their byte lengths) as an item holds it: joined by commas, as bytes, each
 * string written straight into one buffer. Joining the strings first made one more copy, on V8's
 * heap: for a bulk submit's thousand events, a string in the large-object space each time.
 */
function encodeEvents(json: readonly string[], sizes: readonly number[]): { json: Buffer; sizes: readonly number[]; bytes: number } {
  let bytes = 0;
  for (const size of sizes) bytes += inCommit(size);
  // No comma after the last event; an item may hold none (commit skips it).
  const joined = Buffer.allocUnsafe(Math.max(0, bytes - 1));
  let at = 0;
  for (let i = 0; i < json.length; i++) {
    if (i > 0) joined[at++] = COMMA_BYTE;
    at += joined.write(json[i]!, at);
  }
  return { json: joined, sizes, bytes };
}

export class PartitionWriter {
  readonly partition: string;
  private readonly subject: string;
  private tip: PartitionTip;
  private counter = 0;
  private queued: Item[] = [];
  private inFlight = false;
  private flushScheduled = false;
  private readonly busy = new Map<string, Busy>();
  /** Commands still reading before they decide (holding): the partition is not idle meanwhile. */
  private holding = 0;
  private closedWith: Error | undefined;
  /** Resolves once this node has folded the partition to the tip: nothing is decided before. */
  private gate: Promise<void> = Promise.resolve();
  /** `gate` has resolved: a flush publishes in the turn it runs in, with no await before it. */
  private gateOpen = false;
  private jsm: JetStreamManager | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: EventStore,
    private readonly options: PartitionWriterOptions,
  ) {
    this.partition = options.partition;
    this.subject = subjects.partition(options.partition);
    this.tip = options.tip;
    this.setGate(options.refoldTo(options.tip.seq));
    // Epochs never go back in a partition: a writer that finds a later one at the tip was
    // deposed before it wrote anything.
    if (options.tip.epoch > options.epoch) this.stepDown(options.tip.epoch);
  }

  private setGate(gate: Promise<void>): void {
    this.gate = gate;
    this.gateOpen = false;
    gate.then(
      () => {
        if (this.gate === gate) this.gateOpen = true;
      },
      () => undefined,
    );
  }

  private stepDown(foreignEpoch: number): UnavailableError {
    const reason = new UnavailableError(`partition ${this.partition} has a writer of a later epoch (${foreignEpoch} > ${this.options.epoch}): this node no longer leads it; retry`);
    this.options.log.warn({ partition: this.partition, epoch: this.options.epoch, foreignEpoch }, 'deposed: a later writer appended to the partition; stepping down');
    this.close(reason);
    queueMicrotask(() => this.options.onDeposed?.());
    return reason;
  }

  get epoch(): number {
    return this.options.epoch;
  }

  /** Whether decisions may be made now, with no wait: what `ready` would resolve at once. */
  get decidesNow(): boolean {
    return this.gateOpen && this.closedWith === undefined;
  }

  /** Resolves when decisions may be made (the partition is folded to its tip); rejects once closed. */
  async ready(): Promise<void> {
    await this.gate;
    if (this.closedWith) throw this.closedWith;
  }

  /** Whether nothing waits to be committed or is in flight. */
  get idle(): boolean {
    return !this.inFlight && this.queued.length === 0 && this.busy.size === 0 && this.holding === 0;
  }

  /**
   * Runs `work` (a command that reads for long before it decides: a refresh reading its key
   * source) with the partition counted as busy, so its leader does not let it go as idle meanwhile.
   */
  async hold<T>(work: () => Promise<T>): Promise<T> {
    this.holding += 1;
    try {
      return await work();
    } finally {
      this.holding -= 1;
    }
  }

  /**
   * Whether an event of this aggregate waits in the writer: decide on it only after `settled`.
   * A job is named by its id alone (most calls); another kind by its kind and id.
   */
  isBusy(aggregateId: string, kind: AggregateKind = 'job'): boolean {
    return this.busy.has(busyKey(kind, aggregateId));
  }

  /** Resolves once no event of this aggregate waits in the writer. */
  settled(aggregateId: string, kind: AggregateKind = 'job'): Promise<void> {
    const busy = this.busy.get(busyKey(kind, aggregateId));
    if (!busy) return Promise.resolve();
    return new Promise((resolve) => (busy.waiters ??= []).push(resolve));
  }

  /**
   * Adds decided events to the next commit; resolves with their positions once it is stored and
   * folded. Marks their aggregates busy at once (synchronously), so the caller's decision and
   * this call cannot be split by another decision on the same aggregate.
   */
  append(events: readonly Envelope[]): Promise<Position[]> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const json = events.map(encodeEvent);
    const encoded = encodeEvents(json, byteLengths(json));
    if (encoded.bytes > EVENTS_MAX_BYTES || events.length > COMMIT_LIMITS.maxEvents) {
      return Promise.reject(new InvalidRequestError(`events of ${encoded.bytes} bytes do not fit in one commit (limit ${COMMIT_LIMITS.maxBytes})`));
    }
    return this.enqueue(events, encoded);
  }

  /**
   * Adds many independent events (they may go to different commits): grouped into items that
   * each fit a commit, one promise per group rather than per event. Resolves, once every group is
   * answered, with each event's position or the error its commit failed with.
   */
  async appendEach(events: readonly Envelope[]): Promise<(Position | Error)[]> {
    if (this.closedWith) return events.map(() => this.closedWith!);
    const groups = this.enqueueGroups(events);
    const settled = await Promise.allSettled(groups.map((group) => group.done));
    return settled.flatMap((outcome, g): (Position | Error)[] =>
      outcome.status === 'fulfilled' ? outcome.value : new Array<Error>(groups[g]!.count).fill(outcome.reason instanceof Error ? outcome.reason : new UnavailableError(String(outcome.reason))),
    );
  }

  /**
   * appendEach's grouping, apart from its await: the events' JSON strings are not kept in the
   * waiting function's frame (they would outlive the young generation), only their bytes.
   */
  private enqueueGroups(events: readonly Envelope[]): { readonly count: number; readonly done: Promise<Position[]> }[] {
    const json = events.map(encodeEvent);
    const sizes = byteLengths(json);
    // Checked before anything is queued: nothing of a refused call is committed.
    const tooBig = sizes.find((size) => inCommit(size) > EVENTS_MAX_BYTES);
    if (tooBig !== undefined) throw new InvalidRequestError(`an event of ${inCommit(tooBig)} bytes does not fit in a commit (limit ${COMMIT_LIMITS.maxBytes})`);
    const groups: { readonly count: number; readonly done: Promise<Position[]> }[] = [];
    let start = 0;
    let bytes = 0;
    for (let i = 0; i <= events.length; i++) {
      const full = i === events.length || (i > start && (bytes + inCommit(sizes[i]!) > EVENTS_MAX_BYTES || i - start >= COMMIT_LIMITS.maxEvents));
      if (full && i > start) {
        groups.push({ count: i - start, done: this.enqueue(events.slice(start, i), encodeEvents(json.slice(start, i), sizes.slice(start, i))) });
        start = i;
        bytes = 0;
      }
      if (i < events.length) bytes += inCommit(sizes[i]!);
    }
    return groups;
  }

  private enqueue(events: readonly Envelope[], { json, sizes, bytes }: { json: Buffer; sizes: readonly number[]; bytes: number }): Promise<Position[]> {
    for (const event of events) this.markBusy(busyKey(event.aggregate.kind, event.aggregate.id));
    return new Promise<Position[]>((resolve, reject) => {
      this.queued.push({ events, json, sizes, bytes, resolve, reject });
      this.scheduleFlush();
    });
  }

  /** Refuses everything waiting (the node lost the partition, or stops). */
  close(reason: Error): void {
    if (this.closedWith) return;
    this.closedWith = reason;
    const waiting = this.queued;
    this.queued = [];
    this.fail(waiting, reason);
  }

  private markBusy(id: string): void {
    const busy = this.busy.get(id);
    if (busy) busy.count += 1;
    else this.busy.set(id, { count: 1, waiters: undefined });
  }

  private release(items: readonly Item[]): void {
    for (const item of items) {
      for (const event of item.events) {
        const id = busyKey(event.aggregate.kind, event.aggregate.id);
        const busy = this.busy.get(id);
        if (!busy) continue;
        busy.count -= 1;
        if (busy.count > 0) continue;
        this.busy.delete(id);
        if (busy.waiters !== undefined) for (const wake of busy.waiters) wake();
      }
    }
  }

  private fail(items: readonly Item[], err: Error): void {
    this.release(items);
    for (const item of items) item.reject(err);
  }

  /**
   * Sends at once when idle, but after the current I/O callbacks: a burst decided in one turn of
   * the event loop (a batch submit, claims for many slots) goes out as one commit.
   */
  private scheduleFlush(): void {
    if (this.inFlight || this.flushScheduled) return;
    this.flushScheduled = true;
    (this.options.atEndOfTurn ?? setImmediate)(() => {
      this.flushScheduled = false;
      void this.flush();
    });
  }

  private take(): Item[] {
    let count = 0;
    let events = 0;
    let bytes = 256;
    for (const next of this.queued) {
      if (count > 0 && (events + next.events.length > COMMIT_LIMITS.maxEvents || bytes + next.bytes > COMMIT_LIMITS.maxBytes)) break;
      count += 1;
      events += next.events.length;
      bytes += next.bytes;
    }
    // One splice, not a shift per item: a commit of thousands of items would move the rest each time.
    return this.queued.splice(0, count);
  }

  private async flush(): Promise<void> {
    if (this.inFlight || this.closedWith || this.queued.length === 0) return;
    this.inFlight = true;
    const items = this.take();
    try {
      if (!this.gateOpen) await this.gate;
      await this.commit(items);
    } catch (err) {
      this.fail(items, err instanceof Error ? err : new UnavailableError(String(err)));
    } finally {
      this.inFlight = false;
      if (this.queued.length > 0) this.scheduleFlush();
    }
  }

  private async commit(items: readonly Item[]): Promise<void> {
    if (this.closedWith) throw this.closedWith;
    const { node, epoch } = this.options;
    // Unique across the stream (Nats-Msg-Id dedupe is per stream, not per subject): the epoch
    // is unique per lease taken, and the partition and node make a foreign epoch harmless.
    const id = `${this.partition}.${node}.${epoch}.${++this.counter}`;
    const events = items.flatMap((item) => item.events);
    // The events were encoded once, when they joined; the commit is assembled around them.
    const head = JSON.stringify({ v: COMMIT_VERSION, commit: id, partition: this.partition, writer: { node, epoch }, prev_hash: this.tip.hash });
    const parts: Buffer[] = [Buffer.from(`${head.slice(0, -1)},"events":[`)];
    const eventSizes = items.flatMap((item) => item.sizes);
    const eventStarts = new Uint32Array(eventSizes.length);
    let at = parts[0]!.length;
    let index = 0;
    for (const item of items) {
      if (item.sizes.length === 0) continue;
      if (parts.length > 1) {
        parts.push(COMMA);
        at += 1;
      }
      parts.push(item.json);
      for (const size of item.sizes) {
        eventStarts[index++] = at;
        at += inCommit(size);
      }
      at -= 1;
    }
    parts.push(EVENTS_END);
    const payload = Buffer.concat(parts);
    // The next commit's prev_hash, computed in a later turn than the append's socket write:
    // usually while the append flies, not between its ack and its replies (then after the ack).
    let hash: string | undefined;
    const hashing = setImmediate(() => (hash = commitHash(payload)));
    let seq: number;
    try {
      ({ seq } = await this.store.append({ subject: this.subject, payload, msgId: id, expectedSeq: this.tip.seq }));
    } catch (err) {
      seq = await this.reconcile(id, err);
    } finally {
      clearImmediate(hashing);
    }
    const commit: Commit = { v: COMMIT_VERSION, commit: id, partition: this.partition, writer: { node, epoch }, prev_hash: this.tip.hash, events };
    this.tip = { seq, hash: hash ?? commitHash(payload), epoch };
    this.options.onCommitted({ seq, commit, payload, eventStarts, eventSizes });
    this.release(items);
    let position = 0;
    for (const item of items) {
      const positions = item.events.map(() => positionOf(seq, position++));
      item.resolve(positions);
    }
  }

  /**
   * A commit that was refused or whose fate is unknown. If the partition's tip is this very
   * commit (an earlier send landed late), it is stored: go on. Otherwise its events are not in
   * the log: refuse them, and after a foreign commit fold to it before deciding anything else.
   */
  private async reconcile(id: string, err: unknown): Promise<number> {
    this.jsm ??= await jetstreamManager(this.nc);
    let tip;
    try {
      tip = await readPartitionTip(this.jsm, this.partition);
    } catch (readErr) {
      this.options.log.warn({ err: readErr, partition: this.partition }, 'cannot read the partition tip after a failed commit');
      throw new UnavailableError(`commit to ${this.partition} failed and its fate is unknown; retry`, { cause: err });
    }
    if (tip.msgId === id) return tip.seq;
    if (err instanceof AppendConflictError && tip.seq !== this.tip.seq) {
      // Another writer appended. Of a later epoch: this node was deposed and steps down. Of an
      // earlier one (a deposed leader's late send that landed first): fold it and go on.
      if (tip.epoch > this.options.epoch) throw this.stepDown(tip.epoch);
      // Everything decided here since rests on a state without its commit: refuse it all.
      this.options.log.warn({ partition: this.partition, expected: this.tip.seq, found: tip.seq }, 'a foreign commit in the partition; folding it before deciding again');
      this.tip = { seq: tip.seq, hash: tip.hash, epoch: tip.epoch };
      const stale = this.queued;
      this.queued = [];
      const reason = new UnavailableError(`partition ${this.partition} moved under its writer; retry`, { cause: err });
      this.fail(stale, reason);
      this.setGate(this.options.refoldTo(tip.seq));
      throw reason;
    }
    if (err instanceof Error && !(err instanceof AppendConflictError)) throw err;
    throw new UnavailableError(`commit to ${this.partition} failed; retry`, { cause: err });
  }
}
