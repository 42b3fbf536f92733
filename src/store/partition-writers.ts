/**
 * The partition writers of the queues this node leads: one opened when the lease is taken, serving
 * once the partition is folded to its tip and the queue recovered, closed when the lease goes. A
 * committed commit is folded here at once (read-your-writes without waiting for the tail), moves
 * the tail, and is published live on core NATS: the commit as stored, and with `liveEvents:
 * 'each'` each of its events on its aggregate's subject too.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { positionOf } from '../../machines/index.js';
import { UnavailableError } from '../errors.js';
import type { Logger } from '../logger.js';
import { partitionOfLease, subjects, type LiveEventMode } from '../nats/subjects.js';
import { liveHeaders } from '../nats/encoded-headers.js';
import type { Outbox } from '../nats/outbox.js';
import type { LocalLiveCommits } from './local-live.js';
import type { EventStore } from './event-store.js';
import type { EventFolder } from './kernel.js';
import type { LogTail } from './log-tail.js';
import { PartitionWriter, readPartitionTip, type CommittedCommit } from './partition-writer.js';

export interface PartitionWritersOptions {
  /** The node's append connection (noEcho): commits go out on it. */
  readonly appendNc: NatsConnection;
  /** Live events go out through it (on the append connection), with the replies of the same turn. */
  readonly outbox: Outbox;
  readonly events: EventStore;
  readonly jsm: JetStreamManager;
  readonly node: string;
  readonly kernel: EventFolder;
  readonly tail: LogTail;
  /** A writer found a later epoch in its partition: the node gives up the queue. */
  readonly onDeposed: (queue: string) => void;
  /** Clients embedded in this process: they get each commit at once, beside its NATS copy. */
  readonly localLive: LocalLiveCommits;
  /** What is published live after each commit (DocketOptions.liveEvents). */
  readonly liveEvents: LiveEventMode;
  readonly log: Logger;
}

export class PartitionWriters {
  /** Per led queue, its writer once it serves (folded to the tip, recovered). */
  private readonly serving = new Map<string, Promise<PartitionWriter>>();
  /** The same writers once open: what the idle check reads synchronously. */
  private readonly open = new Map<string, PartitionWriter>();
  /** The same writers once recovered: `writer` hands them out without a promise while they may decide. */
  private readonly recovered = new Map<string, PartitionWriter>();

  constructor(private readonly options: PartitionWritersOptions) {}

  /**
   * Starts writing the queue's partition under `epoch`. `recover` runs once the partition is
   * folded to its tip (DESIGN's recovery matrix); until it has run, every write and heartbeat of
   * the queue waits, so none is answered from a half-recovered state.
   */
  start(queue: string, epoch: number, recover: () => void): void {
    const serving: Promise<PartitionWriter> = this.openWriter(queue, epoch).then(async (writer) => {
      if (this.serving.get(queue) === serving) this.open.set(queue, writer);
      await writer.ready();
      if (this.serving.get(queue) === serving) {
        recover();
        this.recovered.set(queue, writer);
      }
      return writer;
    });
    this.serving.set(queue, serving);
    serving.catch((err: unknown) => this.options.log.warn({ err, queue }, 'cannot start writing the partition'));
  }

  /** Stops writing the queue's partition: what waits in its writer is answered `unavailable`. */
  stop(queue: string, why: string): void {
    const serving = this.serving.get(queue);
    this.serving.delete(queue);
    this.open.delete(queue);
    this.recovered.delete(queue);
    void serving?.then((writer) => writer.close(new UnavailableError(`${why}; retry`)), () => undefined);
  }

  stopAll(why: string): void {
    for (const queue of [...this.serving.keys()]) this.stop(queue, why);
  }

  /**
   * The queue's writer once it may decide; `unavailable` on a node that does not lead the queue.
   * Not a promise when it may decide now (every command but those just after a lease is taken
   * or a foreign commit): two async frames less on each job's path.
   */
  writer(queue: string): PartitionWriter | Promise<PartitionWriter> {
    const writer = this.recovered.get(queue);
    return writer !== undefined && writer.decidesNow ? writer : this.whenReady(queue);
  }

  private async whenReady(queue: string): Promise<PartitionWriter> {
    const serving = this.serving.get(queue);
    if (!serving) throw new UnavailableError(`this node does not lead queue ${queue}; retry`);
    const writer = await serving;
    await writer.ready();
    return writer;
  }

  /** Nothing waits in the queue's writer (or it has none). */
  idle(queue: string): boolean {
    return this.open.get(queue)?.idle ?? !this.serving.has(queue);
  }

  private async openWriter(queue: string, epoch: number): Promise<PartitionWriter> {
    const { appendNc, events, jsm, node, tail, log, outbox } = this.options;
    const partition = partitionOfLease(queue);
    const tip = await readPartitionTip(jsm, partition);
    return new PartitionWriter(appendNc, events, {
      partition,
      node,
      epoch,
      tip,
      onCommitted: (committed) => this.committed(committed),
      refoldTo: (seq) => tail.waitFor(seq),
      onDeposed: () => this.options.onDeposed(queue),
      atEndOfTurn: (task) => outbox.atEndOfTurn(task),
      log: log.child({ queue }),
    });
  }

  private committed({ seq, commit, payload, eventStarts, eventSizes }: CommittedCommit): void {
    const { kernel, tail, outbox } = this.options;
    commit.events.forEach((event, index) => kernel.applyEvent(positionOf(seq, index), event));
    tail.appended(seq);
    // One message per commit whatever it holds: a message per event cost the leader about a
    // sixth of its CPU on the job path (README "Live events").
    outbox.publish(subjects.live(commit.partition), payload, liveHeaders(seq));
    this.options.localLive.published(commit.partition, seq, payload);
    if (this.options.liveEvents !== 'each') return;
    commit.events.forEach((event, index) => {
      // The event's JSON as stored (without its opening brace), with its position in front: no second stringify per event.
      const start = eventStarts[index]!;
      const json = payload.subarray(start + 1, start + eventSizes[index]!);
      outbox.publish(subjects.event(event.aggregate.kind, event.queue, event.aggregate.id), Buffer.concat([Buffer.from(`{"position":{"seq":${seq},"index":${index}},`), json]));
    });
  }
}
