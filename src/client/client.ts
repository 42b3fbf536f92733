/**
 * The TypeScript SDK client: every command over NATS request/reply, and `events()`, an async
 * iterator over the event stream. It needs nothing from a node but the subjects.
 */
import type { ConsumerMessages, OrderedConsumerOptions } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Envelope, JobEvent } from '../../machines/index.js';
import { fromErrorBody, type ErrorBody } from '../errors.js';
import { connectNats, requestBytes } from '../nats/connection.js';
import { decodeEnvelope } from '../nats/codec.js';
import { EVENT_SUBJECTS, STREAM, subjects } from '../nats/subjects.js';
import type { JobSpec } from '../commands/schemas.js';
import type { JobSummary, toDetail } from '../commands/queries.js';
import type { QueueProgress } from '../projections/progress.js';
import type { SubmitItemReply } from '../commands/submit.js';

export interface ClientOptions {
  /** @defaultValue 'nats://127.0.0.1:4222' */
  readonly servers?: string | string[];
  /** Use this connection; `close()` leaves it open. */
  readonly nc?: NatsConnection;
  /** How long a command may take. @defaultValue 30000 */
  readonly requestTimeoutMs?: number;
}

export type SubmitJob = JobSpec;
export interface SubmitResult {
  readonly job_id: string;
  readonly status: string;
  readonly created: boolean;
}
export type JobDetail = ReturnType<typeof toDetail>;

export interface EventsOptions {
  /** Only this queue's job events. */
  readonly queue?: string;
  /** Only these event types. */
  readonly types?: readonly string[];
  /** Where to start: 'now' (default), 'all', a stream sequence or a Date. */
  readonly from?: 'now' | 'all' | number | Date;
  /** Stop iterating when aborted. */
  readonly signal?: AbortSignal;
}

export interface RecordedEvent {
  readonly seq: number;
  readonly subject: string;
  readonly event: Envelope;
}

/** RFC 3339 with microseconds: a millisecond alone cannot order a call and a store in the same ms. */
function toMicrosecondIso(ms: number): string {
  const whole = Math.floor(ms);
  const micros = Math.floor((ms - whole) * 1000);
  return new Date(whole).toISOString().replace('Z', `${String(micros).padStart(3, '0')}Z`);
}

/** An async iterable over stream events; `ready` resolves once events from its start point will be delivered. */
export class EventStream implements AsyncIterable<RecordedEvent> {
  readonly ready: Promise<void>;
  private messages: ConsumerMessages | undefined;
  private closed = false;

  /** Wall-clock time of the call, in ms with a microsecond fraction (stored times are in ns). */
  private readonly calledAt = performance.timeOrigin + performance.now();

  constructor(nc: NatsConnection, private readonly options: EventsOptions) {
    this.ready = this.open(nc);
    // An unobserved failure surfaces on iteration instead.
    this.ready.catch(() => undefined);
  }

  private async open(nc: NatsConnection): Promise<void> {
    // Loaded here, not with the module: a CLI command that only sends requests starts faster
    // without it (about 25 ms of the ~160 ms `docket progress` takes).
    const { DeliverPolicy, jetstream } = await import('@nats-io/jetstream');
    const js = jetstream(nc);
    const from = this.options.from ?? 'now';
    let start: Partial<OrderedConsumerOptions>;
    if (from === 'now') {
      // "Now" is when events() was called, not when the consumer exists: an event appended in
      // between is stored with a later time and is delivered.
      start = { deliver_policy: DeliverPolicy.StartTime, opt_start_time: toMicrosecondIso(this.calledAt) };
    } else if (from === 'all') start = { deliver_policy: DeliverPolicy.All };
    else if (typeof from === 'number') start = { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from };
    else start = { deliver_policy: DeliverPolicy.StartTime, opt_start_time: from.toISOString() };
    const filter = this.options.queue === undefined ? EVENT_SUBJECTS : subjects.jobs(this.options.queue);
    const consumer = await js.consumers.get(STREAM, { filter_subjects: filter, ...start });
    this.messages = await consumer.consume();
    if (this.closed) await this.messages.close();
    this.options.signal?.addEventListener('abort', () => void this.close(), { once: true });
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<RecordedEvent> {
    await this.ready;
    const types = this.options.types === undefined ? undefined : new Set(this.options.types);
    try {
      for await (const msg of this.messages!) {
        let event: Envelope;
        try {
          event = decodeEnvelope(msg.data);
        } catch {
          continue;
        }
        if (types && !types.has(event.type)) continue;
        yield { seq: msg.seq, subject: msg.subject, event };
      }
    } finally {
      await this.close();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.messages?.close();
  }
}

export class Client {
  private readonly timeout: number;
  private constructor(
    readonly nc: NatsConnection,
    private readonly ownsConnection: boolean,
    options: ClientOptions,
  ) {
    this.timeout = options.requestTimeoutMs ?? 30_000;
  }

  static async connect(options: ClientOptions = {}): Promise<Client> {
    if (options.nc) return new Client(options.nc, false, options);
    const nc = await connectNats(options.servers === undefined ? { name: 'docket-client' } : { servers: options.servers, name: 'docket-client' });
    return new Client(nc, true, options);
  }

  /** Sends `docket.cmd.<verb>` and returns the reply's fields, or throws the typed DocketError. */
  async request<T>(verb: string, body: unknown): Promise<T> {
    const msg = await this.nc.request(subjects.command(verb), requestBytes(this.nc, body), { timeout: this.timeout });
    const reply = msg.json<{ ok: boolean; error?: ErrorBody } & T>();
    if (!reply.ok) throw fromErrorBody(reply.error ?? { code: 'unavailable', message: 'reply without error' });
    return reply;
  }

  /** Submits one job. With `id` (a command id) a resend returns the first result. */
  async submit(job: SubmitJob & { id?: string }): Promise<SubmitResult> {
    const { job_id, status, created } = await this.request<SubmitResult>('submit', job);
    return { job_id, status, created };
  }

  /** Submits up to 10,000 jobs in one request; each item reports its own result or error. */
  async submitBatch(jobs: readonly SubmitJob[], options: { id?: string } = {}): Promise<{ jobs: SubmitItemReply[] }> {
    const { jobs: results } = await this.request<{ jobs: SubmitItemReply[] }>('submit', { ...options, jobs });
    return { jobs: results };
  }

  async cancel(jobId: string, options: { id?: string; reason?: string } = {}): Promise<{ job_id: string; status: string }> {
    const { job_id, status } = await this.request<{ job_id: string; status: string }>('cancel', { job_id: jobId, ...options });
    return { job_id, status };
  }

  async get(jobId: string): Promise<JobDetail> {
    const { job, run, history } = await this.request<JobDetail>('get', { job_id: jobId });
    return { job, run, history };
  }

  async list(query: { queue: string; status?: string; limit?: number; cursor?: string }): Promise<{ jobs: JobSummary[]; next_cursor: string | null }> {
    const { jobs, next_cursor } = await this.request<{ jobs: JobSummary[]; next_cursor: string | null }>('list', query);
    return { jobs, next_cursor };
  }

  async progress(queue?: string): Promise<QueueProgress[]> {
    const { queues } = await this.request<{ queues: QueueProgress[] }>('progress', queue === undefined ? {} : { queue });
    return queues;
  }

  /**
   * Events from the stream, in stream order. Starts now unless `from` says otherwise: "now" is
   * the time of this call (events stored from then on), not when iteration begins, and `ready`
   * resolves once the subscription is in place.
   */
  events(options: EventsOptions = {}): EventStream {
    return new EventStream(this.nc, options);
  }

  async close(): Promise<void> {
    if (this.ownsConnection) await this.nc.drain();
  }
}

export type { JobEvent };
