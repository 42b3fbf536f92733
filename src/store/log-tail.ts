/**
 * Follows DOCKET from a sequence and folds every commit's events into the JobStore. Its position
 * (the last stream sequence up to which every commit is applied) is what `waitFor` awaits: a
 * partition's new writer waits for the tail to pass the partition's tip before deciding.
 *
 * Two ways to move the position. Following: an ordered consumer delivers every event, this
 * node's own included (skipped: they were applied from their acks). Solo: while this node is the
 * only writer, the consumer is stopped and the acks of its own appends move the position. Solo
 * halves the messages per append for the node and the server (bench/tail-solo-ab.ts), and is
 * only safe while nothing else writes, so it needs a signal of any other writer: a subscription
 * to the event subjects on the connection that publishes the appends, opened with noEcho, hears
 * exactly the other writers' publishes. One of those, a gap in the sequences of this node's acks,
 * a `waitFor` past the position, or the stream's last sequence staying ahead of the position for
 * a check period, starts the consumer again from the position. While following, that
 * subscription is closed (the consumer brings the other writers' events, and hearing them twice
 * would cost a message each); other writers show there as events of another node. The tail goes
 * solo at a check when none was seen for `soloAfterMs`, after opening the subscription and seeing
 * the position reach the stream's last sequence. The first check runs once the log's past is
 * folded, the rest every `checkEveryMs`.
 */
import { DeliverPolicy, jetstream, jetstreamManager, type Consumer, type ConsumerMessages, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import type { Logger } from '../logger.js';
import { positionOf, type Commit } from '../../machines/index.js';
import { decodeCommit, envelopeProblem, UndecodableEventError } from '../nats/codec.js';
import { LOG_SUBJECTS, parseLogSubject, STREAM } from '../nats/subjects.js';
import { doublingDelayMs, TRY_AGAIN, withinMs } from '../timing.js';
import type { EventFolder } from './kernel.js';
import { pullLimit } from '../nats/pull-limit.js';

/** How long the tail waits for a message before asking the stream whether one is coming. */
const END_PROBE_MS = 500;
/** A consumer that ended within this long of its start counts as a failure to start it. */
const CONSUMER_SHORT_LIFE_MS = 10_000;

export interface LogTailOptions {
  /**
   * The connection this node's appends are published on, opened with noEcho. Without it the
   * tail follows the stream all the time (a node given a shared connection).
   */
  readonly appendConnection?: NatsConnection;
  /** The node name this node's commits carry in `writer.node`: the consumer's copies of them are not another writer's. */
  readonly ownNode?: string;
  /** Stop following after this long without another writer. @defaultValue 5000 */
  readonly soloAfterMs?: number;
  /** How often the stream's last sequence is compared with the position. @defaultValue 1000 */
  readonly checkEveryMs?: number;
}

type Mode = 'following' | 'solo';

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
  /** The consumer behind `messages`: deleted on the server when it stops (it would linger 5 minutes). */
  private consumer: Consumer | undefined;
  private mode: Mode = 'following';
  /** Own appends applied past a gap in the position: the gap is someone else's, or a lost ack. */
  private readonly ahead = new Set<number>();
  /** When another writer was last seen: a hint, or an event of another node appended since start. */
  private lastForeignAt = 0;
  /** Hints heard: one during the going-solo check means another writer, however recent. */
  private hintsHeard = 0;
  /** The stream's last sequence at start: events up to it are the log's past, not a live writer. */
  private liveFrom = Infinity;
  /** The stream's last sequence at the previous check: the position should pass it by the next. */
  private lastSeqAtCheck = 0;
  private switching: Promise<void> = Promise.resolve();
  /** Failures to get a lasting consumer in a row: the delay before the next try doubles with them. */
  private consumerFailures = 0;
  private checker: NodeJS.Timeout | undefined;
  private checking = false;
  private hints: Subscription | undefined;
  private jsm: JetStreamManager | undefined;
  private stopped = false;
  private readonly soloAfterMs: number;
  private readonly checkEveryMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly folder: EventFolder,
    private readonly log: Logger,
    fromSeq: number,
    private readonly options: LogTailOptions = {},
  ) {
    this.position = fromSeq - 1;
    this.soloAfterMs = options.soloAfterMs ?? 5_000;
    this.checkEveryMs = options.checkEveryMs ?? 1_000;
  }

  /** Whether the consumer is delivering (false while this node is the only writer). */
  get following(): boolean {
    return this.mode === 'following';
  }

  /** Starts following from the constructor's sequence. */
  async start(): Promise<void> {
    this.jsm = await jetstreamManager(this.nc);
    if (this.options.appendConnection) {
      this.liveFrom = (await this.jsm.streams.info(STREAM)).state.last_seq;
      this.checker = setInterval(() => void this.check(), this.checkEveryMs);
      this.checker.unref();
    }
    await this.startConsumer();
    // A node that starts alone need not follow until the first period has passed: look as soon
    // as the log's past is folded (a freshly started node taking a bulk submit spent its first
    // second following).
    if (this.options.appendConnection) void this.waitFor(this.liveFrom).then(() => this.check());
  }

  /** This node appended and applied the event at `seq` (from its ack). */
  appended(seq: number): void {
    if (seq <= this.position) return;
    if (seq === this.position + 1) {
      this.advance(seq);
      return;
    }
    this.ahead.add(seq);
    if (this.mode === 'solo') this.follow('a gap before an own append');
  }

  private async startConsumer(): Promise<void> {
    const js = jetstream(this.nc);
    const consumer = await js.consumers.get(STREAM, {
      filter_subjects: LOG_SUBJECTS,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.position + 1,
    });
    this.consumer = consumer;
    const messages = await consumer.consume({
      ...pullLimit(this.nc),
      callback: (msg) => this.applyMessage(msg.seq, msg.subject, msg.data),
    });
    this.messages = messages;
    const startedAt = Date.now();
    void messages.closed().then((err) => this.consumerEnded(messages, startedAt, err));
  }

  /**
   * nats.js ends a consume for good on some errors (a 400, a failed subscription, or too many
   * failed re-creates in a long outage). A tail still following such a consumer would stop
   * folding other writers' events without a word, and waiters would wait forever: start it
   * again from the position. Mode and hints stay as they are, so a check going solo meanwhile
   * still decides on what it heard.
   */
  private consumerEnded(messages: ConsumerMessages, startedAt: number, err: void | Error): void {
    // Stopped on purpose (going solo, or stop()): stopConsumer unset it first. A closed
    // connection (a caller's nc closed before the node) has nothing to restart on.
    if (this.stopped || this.messages !== messages || this.nc.isClosed()) return;
    const { consumer } = this;
    this.messages = undefined;
    this.consumer = undefined;
    void consumer?.delete().catch(() => false);
    // One that ended soon after it started may end again at once: do not hammer the server.
    const delayMs = Date.now() - startedAt < CONSUMER_SHORT_LIFE_MS ? doublingDelayMs(this.consumerFailures++, TRY_AGAIN) : 0;
    if (delayMs === 0) this.consumerFailures = 0;
    this.log.warn({ err, position: this.position, inMs: delayMs }, 'the stream consumer ended; starting it again');
    this.startConsumerSoon(delayMs);
  }

  /**
   * Starts the consumer from the position after `delayMs`, serialised with going solo, and
   * tries again (the delay doubling) while it cannot. Mode and hints are the caller's.
   */
  private startConsumerSoon(delayMs: number): void {
    const start = (): void => {
      this.switching = this.switching
        .then(async () => {
          // Gone solo meanwhile (a check), stopped, or already running again: nothing to do.
          if (this.stopped || this.mode !== 'following' || this.messages || this.nc.isClosed()) return;
          await this.startConsumer();
        })
        .catch((err: unknown) => {
          this.log.error({ err }, 'cannot start the stream consumer; retrying');
          this.startConsumerSoon(doublingDelayMs(this.consumerFailures++, TRY_AGAIN));
        });
    };
    if (delayMs > 0) setTimeout(start, delayMs).unref();
    else start();
  }

  /** Stops the consumer and deletes it on the server (best effort). */
  private async stopConsumer(): Promise<void> {
    const { messages, consumer } = this;
    this.messages = undefined;
    this.consumer = undefined;
    await messages?.close();
    await consumer?.delete().catch(() => false);
  }

  private foreignWriter(): void {
    this.hintsHeard += 1;
    this.lastForeignAt = Date.now();
    if (this.mode === 'solo') this.follow('another writer appended');
  }

  /** Starts the consumer from the position (idempotent; serialised with going solo). */
  private follow(why: string): void {
    if (this.mode === 'following' || this.stopped) return;
    this.mode = 'following';
    this.closeHints();
    this.log.debug({ position: this.position, why }, 'following the stream');
    this.consumerFailures = 0;
    this.startConsumerSoon(0);
  }

  private closeHints(): void {
    this.hints?.unsubscribe();
    this.hints = undefined;
  }

  /**
   * Runs every `checkEveryMs` (public for tests). Solo: the position must have passed what the
   * stream held at the previous check. Following: go solo when no other writer was seen for
   * `soloAfterMs` and everything the stream holds is applied.
   */
  async check(): Promise<void> {
    const appends = this.options.appendConnection;
    if (this.checking || this.stopped || !this.jsm || !appends) return;
    this.checking = true;
    try {
      if (this.mode === 'solo') {
        // An own append's ack takes milliseconds: a sequence unapplied for a whole period is not ours.
        if (this.position < this.lastSeqAtCheck) this.follow('the stream is ahead of the position');
        this.lastSeqAtCheck = (await this.jsm.streams.info(STREAM)).state.last_seq;
        return;
      }
      if (Date.now() - this.lastForeignAt < this.soloAfterMs || !this.messages) return;
      // Hear other writers from now on, before looking at the stream: a publish after this is
      // heard, one before it is in the last sequence read next (or, stored a moment late, found
      // by the solo checks that follow: within two periods).
      if (!this.hints) {
        this.hints = appends.subscribe(LOG_SUBJECTS, { callback: () => this.foreignWriter() });
        await appends.flush();
      }
      const heardBefore = this.hintsHeard;
      const lastSeq = (await this.jsm.streams.info(STREAM)).state.last_seq;
      // Under load the stream is always a few own appends ahead of their acks: give them a moment.
      await this.waitAtMost(lastSeq, this.checkEveryMs);
      const waitedFor = this.waiters.length > 0 && this.waiters[this.waiters.length - 1]!.seq > this.position;
      if (this.mode !== 'following') return;
      // A hint since the subscription was flushed may be of an event the stream stores after
      // lastSeq was read; a known gap is an unapplied event too.
      const anotherWriter = this.hintsHeard !== heardBefore || Date.now() - this.lastForeignAt < this.soloAfterMs;
      if (this.position < lastSeq || waitedFor || anotherWriter || this.ahead.size > 0) {
        this.closeHints();
        return;
      }
      this.mode = 'solo';
      this.lastSeqAtCheck = lastSeq;
      this.log.debug({ position: this.position }, 'only writer: stopped following the stream');
      this.switching = this.switching.then(() => this.stopConsumer()).then(() => undefined, () => undefined);
      await this.switching;
    } catch (err) {
      this.log.warn({ err }, 'stream check failed');
      if (this.mode === 'following') this.closeHints();
    } finally {
      this.checking = false;
    }
  }

  /**
   * Resolves once everything up to `endSeq` (a stream last sequence read earlier) is folded.
   * Messages up to it may have been deleted (a purge), and then no message carries that
   * sequence; the consumer's pending count is no help (nats-server 2.9 reports it inexactly).
   * So while waiting, ask the stream's leader for the next stored message after our position:
   * if there is none up to endSeq, the rest was deleted and the position moves to endSeq.
   */
  async waitForEnd(endSeq: number): Promise<void> {
    const jsm = this.jsm ?? (await jetstreamManager(this.nc));
    while (this.position < endSeq && !this.stopped) {
      await this.waitAtMost(endSeq, END_PROBE_MS);
      if (this.position >= endSeq) return;
      const from = this.position + 1;
      // The stream leader answers (STREAM.MSG.GET), not any replica as DIRECT.GET would: on a
      // replicated stream a follower that has not stored the newest messages yet says "none",
      // and the fold would skip them. 2.9 takes next_by_subj there though nats.js's type omits it.
      const query = { seq: from, next_by_subj: LOG_SUBJECTS };
      let next;
      try {
        // null only when the stream holds no such message.
        next = await jsm.streams.getMessage(STREAM, query);
      } catch (err) {
        // Not an answer (a timeout, a stream without direct get): events may still be stored
        // there, so skipping to endSeq could lose them. Keep folding and ask again.
        this.log.warn({ err, from, endSeq }, 'cannot look ahead in the stream; waiting for the tail');
        continue;
      }
      if (next === null || next.seq > endSeq) {
        // Nothing stored in (position, endSeq]: whatever is in flight to us is past endSeq.
        if (this.position < endSeq) {
          this.log.warn({ from, to: endSeq }, 'events deleted from the stream; skipped');
          this.advance(endSeq);
        }
        return;
      }
      this.log.debug({ position: this.position, next: next.seq, endSeq }, 'still folding');
    }
  }

  /** Folds one stored message. Public so that a bulk replay can feed the same path. */
  applyMessage(seq: number, subject: string, data: Uint8Array): void {
    if (seq <= this.position) return;
    if (this.ahead.has(seq)) {
      // This node's own commit, applied from its ack: the consumer's copy needs no decoding.
    } else if (parseLogSubject(subject) === null) {
      this.skipped += 1;
      if (seq > this.liveFrom) this.lastForeignAt = Date.now();
    } else {
      let commit: Commit | undefined;
      try {
        commit = decodeCommit(data);
      } catch (err) {
        // Never let one message stop the tail: the consumer would stop delivering silently.
        this.skipped += 1;
        if (seq > this.liveFrom) this.lastForeignAt = Date.now();
        this.log.warn({ seq, subject, err }, err instanceof UndecodableEventError ? 'undecodable commit skipped' : 'reading a commit failed');
      }
      if (commit) {
        if (seq > this.liveFrom && commit.writer.node !== this.options.ownNode) this.lastForeignAt = Date.now();
        this.applyCommit(seq, commit);
      }
    }
    // The consumer delivers in stream order: a sequence it skips was deleted.
    this.advance(seq);
  }

  /** Folds the events of a commit stored at `seq`; one that its machine refuses is skipped with an error log. */
  applyCommit(seq: number, commit: Commit): void {
    const { events } = commit;
    for (let index = 0; index < events.length; index++) {
      const event = events[index]!;
      try {
        const problem = envelopeProblem(event);
        if (problem !== null) throw new UndecodableEventError(problem);
        const result = this.folder.applyEvent(positionOf(seq, index), event);
        if (result === 'not_folded') {
          this.skipped += 1;
          continue;
        }
        if (result === 'refused') this.log.error({ seq, index, type: event.type, aggregate: event.aggregate }, 'log event refused by its machine; skipped (run docket audit)');
      } catch (err) {
        this.skipped += 1;
        this.log.error({ seq, index, err }, 'folding an event failed; skipped');
      }
    }
  }

  /** Everything up to `seq` is applied; own appends applied past it may close the gap. */
  private advance(seq: number): void {
    this.position = seq;
    if (this.ahead.size > 0) {
      while (this.ahead.delete(this.position + 1)) this.position += 1;
      for (const s of this.ahead) if (s <= this.position) this.ahead.delete(s);
    }
    if (this.waiters.length > 0 && this.waiters[0]!.seq <= this.position) this.release();
  }

  /** waitFor, for at most `ms` (the waiter stays, and is released when the position passes it). */
  private waitAtMost(seq: number, ms: number): Promise<void> {
    return withinMs(ms, this.waitFor(seq));
  }

  /** Resolves once every event up to `seq` has been applied. */
  waitFor(seq: number): Promise<void> {
    if (seq <= this.position) return Promise.resolve();
    // Past the position and not about to be passed by own acks: only the consumer can pass it.
    if (this.mode === 'solo') this.follow('waiting for an event past the position');
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
    this.stopped = true;
    clearInterval(this.checker);
    this.closeHints();
    await this.switching;
    await this.stopConsumer();
  }
}
