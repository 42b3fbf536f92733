/**
 * Follows DOCKET from a sequence with an ordered consumer and folds every job event into the
 * JobStore. Its position (the last stream sequence applied) is what `waitFor` awaits: a command
 * that lost an append race waits for the tail to pass the winner's sequence, then decides again.
 */
import { DeliverPolicy, jetstream, type ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logger.js';
import { decodeEnvelope, isJobEvent, UndecodableEventError } from '../nats/codec.js';
import { EVENT_SUBJECTS, parseEventSubject, STREAM } from '../nats/subjects.js';
import type { JobStore } from './job-store.js';

interface Waiter {
  readonly seq: number;
  readonly resolve: () => void;
}

export class LogTail {
  /** The last stream sequence applied. */
  position: number;
  /** Messages that were not docket events (undecodable, unknown subject or type). */
  skipped = 0;
  private waiters: Waiter[] = [];
  private messages: ConsumerMessages | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: JobStore,
    private readonly log: Logger,
    fromSeq: number,
  ) {
    this.position = fromSeq - 1;
  }

  /**
   * Starts following. `endSeq` is the stream's last sequence when the caller looked: if the
   * messages up to it were deleted (purged), no message will carry it, so the consumer's pending
   * count tells when everything up to it has been seen.
   */
  async start(endSeq = 0): Promise<void> {
    this.endHint = endSeq;
    const js = jetstream(this.nc);
    const consumer = await js.consumers.get(STREAM, {
      filter_subjects: EVENT_SUBJECTS,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.position + 1,
    });
    this.messages = await consumer.consume({
      max_messages: 10_000,
      callback: (msg) => this.applyMessage(msg.seq, msg.subject, msg.data, msg.info.pending),
    });
    const info = await consumer.info();
    if (info.num_pending === 0 && info.delivered.consumer_seq === 0 && this.position < endSeq) {
      // Nothing to deliver at all from our start: every message up to endSeq is gone.
      this.position = endSeq;
      this.release();
    }
  }

  private endHint = 0;

  /** Folds one stored message. Public so that a bulk replay can feed the same path. */
  applyMessage(seq: number, subject: string, data: Uint8Array, pending?: number): void {
    if (seq <= this.position) return;
    const parsed = parseEventSubject(subject);
    // This node's own appends were applied from their acks: skip decoding them a second time.
    const known = parsed ? this.store.get(parsed.id) : undefined;
    if (known && known.seq >= seq) {
      // already folded
    } else if (parsed) {
      try {
        const event = decodeEnvelope(data);
        if (isJobEvent(event)) {
          const result = this.store.apply({ seq, subject, queue: parsed.queue, jobId: parsed.id, event });
          if (result === 'refused') this.log.warn({ seq, subject, type: event.type }, 'log event refused by its machine; run docket audit');
        } else {
          this.skipped += 1;
        }
      } catch (err) {
        if (!(err instanceof UndecodableEventError)) throw err;
        this.skipped += 1;
        this.log.warn({ seq, subject, err }, 'undecodable event skipped');
      }
    } else {
      this.skipped += 1;
    }
    // Nothing pending after this message: anything up to the end hint was deleted.
    this.position = pending === 0 && this.endHint > seq ? this.endHint : seq;
    if (this.waiters.length > 0 && this.waiters[0]!.seq <= seq) this.release();
  }

  /** Resolves once every event up to `seq` has been applied. */
  waitFor(seq: number): Promise<void> {
    if (seq <= this.position) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiters.push({ seq, resolve });
      this.waiters.sort((a, b) => a.seq - b.seq);
    });
  }

  private release(): void {
    let i = 0;
    while (i < this.waiters.length && this.waiters[i]!.seq <= this.position) this.waiters[i++]!.resolve();
    this.waiters = this.waiters.slice(i);
  }

  async stop(): Promise<void> {
    await this.messages?.close();
    this.messages = undefined;
  }
}
