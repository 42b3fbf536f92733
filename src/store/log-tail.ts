/**
 * Follows DOCKET from a sequence with an ordered consumer and folds every job event into the
 * JobStore. Its position (the last stream sequence applied) is what `waitFor` awaits: a command
 * that lost an append race waits for the tail to pass the winner's sequence, then decides again.
 */
import { DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logger.js';
import { decodeEnvelope, isJobEvent, UndecodableEventError } from '../nats/codec.js';
import { EVENT_SUBJECTS, parseEventSubject, STREAM } from '../nats/subjects.js';
import type { JobStore } from './job-store.js';

/** How long the tail waits for a message before asking the stream whether one is coming. */
const END_PROBE_MS = 500;

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

  /** Starts following from the constructor's sequence. */
  async start(): Promise<void> {
    const js = jetstream(this.nc);
    const consumer = await js.consumers.get(STREAM, {
      filter_subjects: EVENT_SUBJECTS,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.position + 1,
    });
    this.messages = await consumer.consume({
      max_messages: 10_000,
      callback: (msg) => this.applyMessage(msg.seq, msg.subject, msg.data),
    });
  }

  /**
   * Resolves once everything up to `endSeq` (a stream last sequence read earlier) is folded.
   * Messages up to it may have been deleted (a purge), and then no message carries that
   * sequence; the consumer's pending count is no help (nats-server 2.9 reports it inexactly).
   * So while waiting, ask the stream directly for the next stored message after our position:
   * if there is none up to endSeq, the rest was deleted and the position moves to endSeq.
   */
  async waitForEnd(endSeq: number): Promise<void> {
    const jsm = await jetstreamManager(this.nc);
    while (this.position < endSeq) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.waitFor(endSeq), new Promise<void>((resolve) => (timer = setTimeout(resolve, END_PROBE_MS)))]);
      clearTimeout(timer);
      if (this.position >= endSeq) return;
      const from = this.position + 1;
      const next = await jsm.direct.getMessage(STREAM, { seq: from, next_by_subj: EVENT_SUBJECTS }).catch(() => null);
      if (next === null || next.seq > endSeq) {
        // Nothing stored in (position, endSeq]: whatever is in flight to us is past endSeq.
        if (this.position < endSeq) {
          this.log.warn({ from, to: endSeq }, 'events deleted from the stream; skipped');
          this.position = endSeq;
          this.release();
        }
        return;
      }
      this.log.debug({ position: this.position, next: next.seq, endSeq }, 'still folding');
    }
  }

  /** Folds one stored message. Public so that a bulk replay can feed the same path. */
  applyMessage(seq: number, subject: string, data: Uint8Array): void {
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
        // Never let one message stop the tail: the consumer would stop delivering silently.
        this.skipped += 1;
        if (err instanceof UndecodableEventError) this.log.warn({ seq, subject, err }, 'undecodable event skipped');
        else this.log.error({ seq, subject, err }, 'folding an event failed');
      }
    } else {
      this.skipped += 1;
    }
    this.position = seq;
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
