/**
 * The transport of the partition writers (src/store/partition-writer.ts), the only publishers to
 * DOCKET. Each append is one stored message on its partition's subject, guarded by the subject's
 * expected last sequence (0 for the first) and deduplicated by `Nats-Msg-Id` (the commit id). A
 * lost race is an AppendConflictError carrying the subject's actual last sequence.
 *
 * Appends go over a lean path: a core publish with a reply subject on one shared inbox
 * subscription, the PubAck parsed here. nats.js's `js.publish()` spends its time in the client
 * (STACK.md: ~26k/s against ~115k/s this way); the server-side semantics are the same headers.
 */
import { createInbox, type NatsConnection, type Subscription } from '@nats-io/nats-core';
import { NO_RESPONDERS } from '../nats/subjects.js';
import { appendHeaders } from '../nats/encoded-headers.js';
import { ConflictError, DocketError, UnavailableError } from '../errors.js';
import { doublingDelayMs } from '../timing.js';

export interface Appended {
  readonly seq: number;
  /** true when the stream already held this msg id (a resend inside the duplicate window). */
  readonly duplicate: boolean;
}

/** A guarded append lost its race: `actualSeq` is the subject's last sequence on the server. */
export class AppendConflictError extends ConflictError {
  readonly subject: string;
  readonly expectedSeq: number;
  readonly actualSeq: number;
  constructor(subject: string, expectedSeq: number, actualSeq: number) {
    super(`append to ${subject} expected last sequence ${expectedSeq}, found ${actualSeq}`, {
      details: { subject, expected_seq: expectedSeq, actual_seq: actualSeq },
    });
    this.name = 'AppendConflictError';
    this.subject = subject;
    this.expectedSeq = expectedSeq;
    this.actualSeq = actualSeq;
  }
}

export interface AppendRequest {
  readonly subject: string;
  readonly payload: Uint8Array;
  /** The Nats-Msg-Id: a resend with the same id is stored once. */
  readonly msgId: string;
  /** The subject's last stream sequence as the writer knows it; 0 for its first message. */
  readonly expectedSeq: number;
}

interface Pending {
  readonly request: AppendRequest;
  resolve(value: Appended): void;
  reject(err: Error): void;
  sentAt: number;
  attempts: number;
}

const WRONG_LAST_SEQUENCE = 10071;
/** Between publishes of one append after no stream answered: quick, as a leader election is. */
const RESEND = { firstMs: 50, maxMs: 1_000 } as const;
const decoder = new TextDecoder();

export interface EventStoreOptions {
  /** How long to wait for a PubAck before publishing again with the same msg id. @defaultValue 5000 */
  readonly ackTimeoutMs?: number;
  /** Publishes of one append before giving up with `unavailable`. @defaultValue 6 */
  readonly maxAttempts?: number;
}

export class EventStore {
  private readonly inbox: string;
  private readonly sub: Subscription;
  private readonly pending = new Map<number, Pending>();
  private closed = false;
  /** Appends between a failed attempt and their next send. */
  private readonly backingOff = new Map<NodeJS.Timeout, Pending>();
  private nextToken = 1;
  private readonly sweeper: NodeJS.Timeout;
  private readonly ackTimeoutMs: number;
  private readonly maxAttempts: number;

  constructor(
    private readonly nc: NatsConnection,
    options: EventStoreOptions = {},
  ) {
    this.ackTimeoutMs = options.ackTimeoutMs ?? 5000;
    this.maxAttempts = options.maxAttempts ?? 6;
    this.inbox = createInbox();
    this.sub = nc.subscribe(`${this.inbox}.*`, { callback: (err, msg) => (err ? undefined : this.onAck(msg.subject, msg.data, msg.headers?.code ?? 0)) });
    this.sweeper = setInterval(() => this.sweep(), Math.max(50, Math.floor(this.ackTimeoutMs / 4)));
    this.sweeper.unref();
  }

  /** Appends one message. Resolves with its stream sequence; rejects with AppendConflictError or UnavailableError. */
  append(request: AppendRequest): Promise<Appended> {
    // A command still in flight when the node closes: its ack could never arrive.
    if (this.closed) return Promise.reject(new UnavailableError('event store closed'));
    return new Promise<Appended>((resolve, reject) => {
      const pending: Pending = { request, resolve, reject, sentAt: 0, attempts: 0 };
      this.send(pending);
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const p of this.pending.values()) p.reject(new UnavailableError('event store closed'));
    this.pending.clear();
    // Appends waiting to be sent again: never sent after close, and answered.
    for (const [timer, p] of this.backingOff) {
      clearTimeout(timer);
      p.reject(new UnavailableError('event store closed'));
    }
    this.backingOff.clear();
    this.sub.unsubscribe();
  }

  private send(pending: Pending): void {
    const token = this.nextToken++;
    pending.sentAt = Date.now();
    pending.attempts += 1;
    this.pending.set(token, pending);
    try {
      const h = appendHeaders(pending.request.msgId, pending.request.expectedSeq);
      this.nc.publish(pending.request.subject, pending.request.payload, { reply: `${this.inbox}.${token}`, headers: h });
    } catch (err) {
      this.pending.delete(token);
      // Headers refused (a msg id with a line break) are bad input, not an outage to retry.
      pending.reject(err instanceof DocketError ? err : new UnavailableError('publish failed', { cause: err }));
    }
  }

  private onAck(subject: string, data: Uint8Array, statusCode: number): void {
    const token = Number(subject.slice(this.inbox.length + 1));
    const pending = this.pending.get(token);
    if (!pending) return; // a late ack of a publish we already resent; the resend's ack decides
    this.pending.delete(token);
    if (statusCode === NO_RESPONDERS || data.length === 0) {
      // No responders: the stream is not there (yet), e.g. during a leader election. Retry.
      this.retryOrFail(pending, 'no stream responded');
      return;
    }
    let ack: { seq?: number; duplicate?: boolean; error?: { err_code?: number; description?: string } };
    try {
      ack = JSON.parse(decoder.decode(data));
    } catch (err) {
      pending.reject(new UnavailableError('unreadable publish ack', { cause: err }));
      return;
    }
    if (ack.error) {
      const actual = Number(/(\d+)\s*$/.exec(ack.error.description ?? '')?.[1] ?? NaN);
      if (ack.error.err_code === WRONG_LAST_SEQUENCE && Number.isFinite(actual)) {
        pending.reject(new AppendConflictError(pending.request.subject, pending.request.expectedSeq, actual));
      } else {
        pending.reject(new UnavailableError(`append refused: ${ack.error.description ?? 'unknown error'}`, { details: { ...ack.error } }));
      }
      return;
    }
    if (!(typeof ack.seq === 'number' && ack.seq > 0)) {
      // Newer servers answer a resend whose original is still being stored with seq 0: that
      // names no event to wait for. Ask again; the same msg id keeps it one event.
      this.retryOrFail(pending, 'ack without a sequence');
      return;
    }
    pending.resolve({ seq: ack.seq, duplicate: ack.duplicate === true });
  }

  private retryOrFail(pending: Pending, why: string): void {
    if (pending.attempts >= this.maxAttempts) {
      pending.reject(new UnavailableError(`append to ${pending.request.subject} failed: ${why}`));
      return;
    }
    // The same msg id makes a resend safe: if the first publish was stored, this is a duplicate.
    const timer = setTimeout(() => {
      this.backingOff.delete(timer);
      this.send(pending);
    }, doublingDelayMs(pending.attempts, RESEND));
    timer.unref();
    this.backingOff.set(timer, pending);
  }

  private sweep(): void {
    const now = Date.now();
    for (const [token, pending] of this.pending) {
      if (now - pending.sentAt < this.ackTimeoutMs) continue;
      this.pending.delete(token);
      // A timeout is an unknown outcome (STACK.md: committed later in 3 of 4 runs): resend.
      this.retryOrFail(pending, 'no ack in time');
    }
  }
}
