/**
 * Bulk reading of the DOCKET stream for replay, audit and export. Log v2: each stored message is
 * a commit of one partition (`docket.log.q.<queue>` or `docket.log.sys`); this reads commits as
 * stored and leaves unpacking their events to src/audit/decode.ts. Reads with an ordered consumer
 * and large pulls (STACK.md: ~275k msgs/s with 10,000-message pulls against ~141k/s with the
 * default 100), and stops at a bound read before the first message: the stream's (or the
 * filter's) last sequence at the start. Stopping at `pending === 0` is racy while writers are
 * active, and nats-server 2.9's pending count is not exact (9 too many seen on a fresh consumer;
 * a read stopped 11 short of a million); a bound read first is exact, and a read never waits for
 * events appended after it began. `readLogPacked` feeds an audit on another thread.
 *
 * Touches only `DOCKET` (read side): no consumer outlives a read (ordered consumers are
 * ephemeral and deleted when the read ends).
 */
import { jetstream, jetstreamManager, DeliverPolicy, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { parseDocketHeaders, toExpectedSeq, type PackWriter } from '../audit/packed.js';
import type { RecordedMessage } from '../audit/types.js';
import { EXPECTED_HEADER, LOG_SUBJECTS, MSG_ID_HEADER, queuePartition, STREAM, subjects } from '../nats/subjects.js';
import { pullLimit } from '../nats/pull-limit.js';

/** One stored message of DOCKET (one commit), as the audit and replays see it (defined with the audit). */
export type LogMessage = RecordedMessage;

/** The filter for every commit, or for one queue's partition. */
export function logFilter(queue?: string): string {
  return queue === undefined ? LOG_SUBJECTS : subjects.partition(queuePartition(queue));
}

export interface ReadLogOptions {
  /** First stream sequence to read. @defaultValue 1 */
  readonly fromSeq?: number;
  /** Last stream sequence to read (inclusive). @defaultValue the last sequence when the read starts */
  readonly toSeq?: number;
  /** Start at the first message stored at or after this time (ms since the epoch or an ISO string). */
  readonly startTime?: number | string;
  /** One subject filter (2.9 takes a single filter): a partition's subject (`logFilter(queue)`). @defaultValue `docket.log.>` */
  readonly filter?: string;
  /** Messages (commits) per array readLogBatches yields, at most 200 (pulls: src/nats/pull-limit.ts). @defaultValue 1_000 */
  readonly batch?: number;
  /** Called once the bounds are known, before the first message (for progress bars). */
  readonly onBounds?: (bounds: LogBounds) => void;
  /** Ends the read early (without an error) when aborted. */
  readonly signal?: AbortSignal;
}

export interface LogBounds {
  readonly fromSeq: number;
  readonly toSeq: number;
}

/**
 * Pull size, in commits. STACK.md measured ~2x the default's rate with 10,000-message pulls of
 * single events; commits are tens of KB, and a first pull of 10,000 commits of ~33 KB stalled
 * the read on 2.9.10 (nothing delivered), while pulls bounded by bytes instead (16 MiB) stalled a
 * read once: the last 659 commits of a 1,659-commit log came 45 s late. 1,000 commits per pull
 * (up to ~30 MB; a 300,000-event log of 3,000 commits read in 0.15-0.4 s here) did neither.
 */
export const DEFAULT_READ_BATCH = 1_000;

async function manager(nc: NatsConnection): Promise<JetStreamManager> {
  return jetstreamManager(nc);
}

function isNotFound(err: unknown): boolean {
  return err instanceof Error && /not found|no message found/i.test(err.message);
}

/**
 * The stream's last sequence, or the last sequence on `filter` (wildcards allowed: 2.9's
 * last-by-subject lookup takes them). 0 when there is nothing.
 */
export async function lastSeq(nc: NatsConnection, filter?: string): Promise<number> {
  const jsm = await manager(nc);
  if (filter === undefined || filter === LOG_SUBJECTS) {
    try {
      const info = await jsm.streams.info(STREAM);
      return info.state.last_seq;
    } catch (err) {
      if (isNotFound(err)) return 0;
      throw err;
    }
  }
  try {
    const m = await jsm.streams.getMessage(STREAM, { last_by_subj: filter });
    return m?.seq ?? 0;
  } catch (err) {
    if (isNotFound(err)) return 0;
    throw err;
  }
}

/**
 * About how many bytes a read of `bounds` on `filter` fetches: the stream's mean stored message
 * times the messages read (the stored ones in range; on a filter, its messages in the whole
 * stream, at most the range's sequences: an upper bound). A hint for choosing how to read, not
 * a count: 0 when the stream cannot say.
 */
export async function approxReadBytes(nc: NatsConnection, bounds: LogBounds, filter: string = LOG_SUBJECTS): Promise<number> {
  const jsm = await manager(nc);
  const whole = filter === LOG_SUBJECTS;
  let info;
  try {
    info = whole ? await jsm.streams.info(STREAM) : await jsm.streams.info(STREAM, { subjects_filter: filter });
  } catch {
    return 0;
  }
  const { messages, bytes, first_seq: first } = info.state;
  if (messages === 0) return 0;
  // A purged or trimmed stream starts past 1, and deleted messages leave holes: count what is stored.
  const inRange = Math.max(0, bounds.toSeq - Math.max(bounds.fromSeq, first) + 1);
  const stored = whole ? messages : Object.values(info.state.subjects ?? {}).reduce((sum, n) => sum + n, 0);
  return (bytes / messages) * Math.min(inRange, stored);
}

/** The stored time (ms) of the first message at or after `seq`, with its sequence; null past the end. */
async function firstAtOrAfter(jsm: JetStreamManager, seq: number): Promise<{ seq: number; time: number } | null> {
  try {
    // `next_by_subj` skips deleted sequences; the client's type for streams.getMessage lacks it.
    const m = await jsm.streams.getMessage(STREAM, { seq, next_by_subj: LOG_SUBJECTS } as unknown as { seq: number });
    return m ? { seq: m.seq, time: m.time.getTime() } : null;
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
}

function toMs(time: number | string): number {
  const ms = typeof time === 'number' ? time : Date.parse(time);
  if (!Number.isFinite(ms)) throw new Error(`not a time: ${String(time)}`);
  return ms;
}

/**
 * The last stream sequence stored at or before `time`: what `--at <ISO time>` replays up to.
 * 0 when the stream holds nothing that old. A binary search by sequence over stored timestamps,
 * which never decrease along the stream (~20 lookups for a million messages).
 */
export async function endSeqAt(nc: NatsConnection, time: number | string): Promise<number> {
  const at = toMs(time);
  const jsm = await manager(nc);
  let info;
  try {
    info = await jsm.streams.info(STREAM);
  } catch (err) {
    if (isNotFound(err)) return 0;
    throw err;
  }
  let lo = info.state.first_seq;
  let hi = info.state.last_seq;
  if (info.state.messages === 0) return 0;
  const first = await firstAtOrAfter(jsm, lo);
  if (!first || first.time > at) return 0;
  let best = first.seq;
  lo = first.seq + 1;
  // Invariant: `best` is stored at or before `at`; every sequence above `hi` is after it.
  while (lo <= hi) {
    const mid = Math.floor((lo + hi) / 2);
    const m = await firstAtOrAfter(jsm, mid);
    if (!m || m.seq > hi) {
      hi = mid - 1;
    } else if (m.time <= at) {
      best = m.seq;
      lo = m.seq + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

/** The first sequence stored at or after `time`; one past the last when none is. */
export async function startSeqAt(nc: NatsConnection, time: number | string): Promise<number> {
  const at = toMs(time);
  const end = await endSeqAt(nc, at - 1);
  // Everything up to `end` is older than `at`; the next stored message is the first not older.
  return end + 1;
}

/** The time (ms) a message was stored, or null when the sequence holds none. */
export async function storedTimeOf(nc: NatsConnection, seq: number): Promise<number | null> {
  const jsm = await manager(nc);
  try {
    const m = await jsm.streams.getMessage(STREAM, { seq });
    return m ? m.time.getTime() : null;
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
}

/** Resolves the options to a closed range of sequences; null when it holds nothing to read. */
export async function resolveBounds(nc: NatsConnection, options: ReadLogOptions = {}): Promise<LogBounds | null> {
  const last = await lastSeq(nc, options.filter);
  if (last === 0) return null;
  let fromSeq = Math.max(1, options.fromSeq ?? 1);
  if (options.startTime !== undefined) fromSeq = Math.max(fromSeq, await startSeqAt(nc, options.startTime));
  const toSeq = Math.min(last, options.toSeq ?? last);
  if (fromSeq > toSeq) return null;
  return { fromSeq, toSeq };
}

/** The parts of nats-core's MsgImpl the fast path reads (1.6x the read rate of `m.headers`). */
interface RawMsg {
  readonly _msg: { readonly hdr: number; readonly subject?: unknown };
  readonly _rdata: Uint8Array;
}

function rawOf(m: JsMsg): RawMsg | null {
  const inner = (m as unknown as { msg?: Partial<RawMsg> }).msg;
  if (inner && inner._rdata instanceof Uint8Array && inner._msg && typeof inner._msg.hdr === 'number') return inner as RawMsg;
  return null;
}

/**
 * Builds a LogMessage. nats.js decodes headers into a Map per message (with a split and a trim
 * per line); reading the two headers docket needs from the raw block doubles the read rate. The
 * public API is the fallback when a future client changes its internals (a test compares both).
 */
export function toLogMessage(m: JsMsg, fast = true): LogMessage {
  const info = m.info;
  const time = Math.floor(info.timestampNanos / 1e6);
  const raw = fast ? rawOf(m) : null;
  if (raw !== null) {
    const hdr = raw._msg.hdr;
    let msgId: string | null = null;
    let expected: number | null = null;
    if (hdr > 0) ({ msgId, expected } = parseDocketHeaders(raw._rdata.subarray(0, hdr)));
    return {
      seq: info.streamSequence,
      // The consumer has decoded (and cached) the subject already to route the message.
      subject: m.subject,
      time,
      msgId,
      expectedLastSubjectSeq: expected,
      data: hdr > 0 ? raw._rdata.subarray(hdr) : raw._rdata,
    };
  }
  const h = m.headers;
  return {
    seq: info.streamSequence,
    subject: m.subject,
    time,
    msgId: h?.get(MSG_ID_HEADER) || null,
    expectedLastSubjectSeq: toExpectedSeq(h ? h.get(EXPECTED_HEADER) : null),
    data: m.data,
  };
}

/**
 * Low-level: calls `onMessage` for every raw message in [fromSeq, toSeq] on `filter`, in stream
 * order, and resolves when the last one has been handed over. Everything else builds on this.
 */
async function readRange(
  nc: NatsConnection,
  bounds: LogBounds,
  filter: string,
  onMessage: (m: JsMsg) => void,
  signal?: AbortSignal,
): Promise<number> {
  if (signal?.aborted) return 0;
  const js = jetstream(nc);
  const consumer = await js.consumers.get(STREAM, {
    filter_subjects: filter,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: bounds.fromSeq,
  });
  let count = 0;
  let finished = false;
  let failure: unknown = null;
  // The callback form: nats.js calls it synchronously per message, with no promise per message
  // as `for await` has. A throw from `onMessage` stops the read and is rethrown below.
  const messages = await consumer.consume({
    ...pullLimit(nc),
    callback: (m) => {
      if (finished) return;
      const seq = m.info.streamSequence;
      if (seq > bounds.toSeq) {
        finished = true;
        void messages.close();
        return;
      }
      try {
        onMessage(m);
      } catch (err) {
        failure = err;
        finished = true;
        void messages.close();
        return;
      }
      count += 1;
      // The bound was read before the first message and is a message on the filter (or lies
      // before one), so `seq >= toSeq`, or a message past it, always comes. `pending` is not an
      // end: nats-server 2.9 reported 0 pending a few messages before the end of a 1M-message
      // read while nothing was written. It only makes us look whether the range was deleted.
      if (seq >= bounds.toSeq) {
        finished = true;
        void messages.close();
      } else if (m.info.pending === 0) {
        void lastSeq(nc, filter).then((last) => {
          if (!finished && last <= seq) {
            finished = true;
            void messages.close();
          }
        }, () => undefined);
      }
    },
  });
  const onAbort = (): void => {
    finished = true;
    void messages.close();
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  if (signal?.aborted) onAbort();
  const closed = await messages.closed();
  signal?.removeEventListener('abort', onAbort);
  if (failure !== null) throw failure;
  if (closed instanceof Error && !finished) throw closed;
  if (!finished) throw new Error(`read of ${STREAM} ended at ${count} messages before sequence ${bounds.toSeq}`);
  return count;
}

/**
 * Reads DOCKET in stream order, in batches (arrays of up to `batch` messages), which is what the
 * fast paths (audit, replay) consume: one await per batch instead of one per message.
 */
export async function* readLogBatches(nc: NatsConnection, options: ReadLogOptions = {}): AsyncGenerator<LogMessage[]> {
  const bounds = await resolveBounds(nc, options);
  if (bounds === null) return;
  options.onBounds?.(bounds);
  const filter = options.filter ?? LOG_SUBJECTS;
  const batch = options.batch ?? DEFAULT_READ_BATCH;
  const flushAt = Math.min(batch, 200);
  // Ends the read when the caller stops iterating early (break, throw) or aborts.
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  if (options.signal?.aborted) stop.abort();
  // The consumer's callbacks run per socket read and this generator's consumer runs between
  // them, so the hand-over holds about one read's worth of messages, not the log.
  // A hand-over between the consumer's callback world and the generator.
  let buffer: LogMessage[] = [];
  const ready: LogMessage[][] = [];
  let done = false;
  let failure: unknown = null;
  let wake: (() => void) | null = null;
  const notify = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  const reading = readRange(
    nc,
    bounds,
    filter,
    (m) => {
      buffer.push(toLogMessage(m));
      if (buffer.length >= flushAt) {
        ready.push(buffer);
        buffer = [];
        notify();
      }
    },
    stop.signal,
  ).then(
    () => {
      if (buffer.length > 0) ready.push(buffer);
      buffer = [];
      done = true;
      notify();
    },
    (err: unknown) => {
      failure = err;
      done = true;
      notify();
    },
  );
  try {
    for (;;) {
      const next = ready.shift();
      if (next) {
        yield next;
        continue;
      }
      if (done) break;
      await new Promise<void>((resolve) => (wake = resolve));
    }
    if (failure !== null) throw failure;
  } finally {
    stop.abort();
    options.signal?.removeEventListener('abort', onAbort);
    await reading;
  }
}

/** Reads DOCKET in stream order, one message at a time. */
export async function* readLog(nc: NatsConnection, options: ReadLogOptions = {}): AsyncGenerator<LogMessage> {
  for await (const batch of readLogBatches(nc, options)) yield* batch;
}

export interface RawReadResult {
  readonly messages: number;
  readonly bytes: number;
  readonly ms: number;
  readonly perSecond: number;
}

/**
 * The raw read rate, for benchmarks: the same ordered consumer and pull size as `readLog`, each
 * message's sequence and payload touched, nothing decoded (no headers, no JSON).
 */
export async function measureRawRead(nc: NatsConnection, options: ReadLogOptions = {}): Promise<RawReadResult> {
  const started = performance.now();
  const bounds = await resolveBounds(nc, options);
  let messages = 0;
  let bytes = 0;
  if (bounds !== null) {
    messages = await readRange(nc, bounds, options.filter ?? LOG_SUBJECTS, (m) => {
      bytes += m.data.length;
    });
  }
  const ms = performance.now() - started;
  return { messages, bytes, ms, perSecond: ms > 0 ? (messages * 1000) / ms : 0 };
}

/** Where `readLogPacked` hands its batches: an audit on another thread (src/audit/threaded.ts). */
export interface PackedSink {
  write(buffer: ArrayBuffer, count: number, lastSeq: number): void;
  /** Batches written and not yet taken in. */
  readonly backlog: number;
  whenBelow(batches: number): Promise<void>;
}

/** Batches (about 1 MiB each) a sink may hold before the reader pauses, and resumes below the half. */
const SINK_HIGH_WATER = 16;

/**
 * Reads DOCKET in stream order into packed batches (src/audit/packed.ts) for a sink on another
 * thread: the raw subject, header block and data of each message are copied as they arrive,
 * nothing is decoded here. Flow control: when the sink holds too many batches the read pauses
 * (its ordered consumer is closed) and resumes after the last sequence packed once the sink has
 * caught up, so memory stays bounded when the sink is the slower side. Returns the number of
 * messages read.
 */
export async function readLogPacked(
  nc: NatsConnection,
  options: ReadLogOptions,
  sink: PackedSink,
  createWriter: (flush: (buffer: ArrayBuffer, count: number, lastSeq: number) => void) => PackWriter,
): Promise<number> {
  const bounds = await resolveBounds(nc, options);
  if (bounds === null) return 0;
  options.onBounds?.(bounds);
  const filter = options.filter ?? LOG_SUBJECTS;
  const writer = createWriter((buffer, count, lastSeq) => sink.write(buffer, count, lastSeq));
  let count = 0;
  let next = bounds.fromSeq;
  let ended = false;
  while (!ended && next <= bounds.toSeq && !options.signal?.aborted) {
    await sink.whenBelow(SINK_HIGH_WATER / 2);
    let paused = false;
    // `readRange` stops at `toSeq`; a pause stops it early through its abort signal.
    const pause = new AbortController();
    const onAbort = (): void => pause.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await readRange(
        nc,
        { fromSeq: next, toSeq: bounds.toSeq },
        filter,
        (m) => {
          const info = m.info;
          const seq = info.streamSequence;
          const raw = rawOf(m);
          const time = Math.floor(info.timestampNanos / 1e6);
          if (raw !== null) {
            const hdr = raw._msg.hdr;
            const subject = raw._msg.subject instanceof Uint8Array ? raw._msg.subject : m.subject;
            writer.add(seq, time, subject, hdr > 0 ? raw._rdata.subarray(0, hdr) : null, hdr > 0 ? raw._rdata.subarray(hdr) : raw._rdata);
          } else {
            writer.addRecorded(toLogMessage(m, false));
          }
          count += 1;
          next = seq + 1;
          if (seq < bounds.toSeq && sink.backlog >= SINK_HIGH_WATER && !paused) {
            paused = true;
            pause.abort();
          }
        },
        pause.signal,
      );
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
    writer.end();
    if (!paused) ended = true;
  }
  writer.end();
  return count;
}
