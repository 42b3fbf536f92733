/**
 * The TypeScript SDK client: every command over NATS request/reply, and `events()`, an async
 * iterator over the log's events: it reads the stored commits (durable and gap-free from any
 * position or time) and unpacks them, so it sees exactly what every node folds. It needs nothing
 * from a node but the subjects.
 */
import type { ConsumerMessages, OrderedConsumerOptions } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { positionOf, type Envelope, type JobEvent, type Position } from '../../machines/index.js';
import { connectNats, replyFields, requestBytes } from '../nats/connection.js';
import { Requester } from '../nats/requester.js';
import type { LocalCommands } from '../commands/command-service.js';
import { pullLimit } from '../nats/pull-limit.js';
import type { QueueSettingsChange } from '../../machines/index.js';
import type { QueueShow } from '../commands/flow-queries.js';
import type { QueueView } from '../commands/queue-commands.js';
import type { Reserved, ReservationView } from '../commands/reservation-commands.js';
import { decodeCommit, envelopeProblem } from '../nats/codec.js';
import { LOG_SUBJECTS, queuePartition, STREAM, subjects } from '../nats/subjects.js';
import { readLive, type LiveEvents, type LiveOptions, type LocalLive } from './live.js';
export type { LiveEvent, LiveEvents, LiveOptions, LocalLive } from './live.js';
import type { FanOutView } from '../commands/jobnode-commands.js';
import type { JobSpec } from '../commands/schemas.js';
import type { JobSummary, toDetail } from '../commands/queries.js';
import type { QueueProgress } from '../projections/progress.js';
import type { SubmitItemReply } from '../commands/submit.js';
import type { BulkReply } from '../commands/bulk-commands.js';
import type { DeleteReply, IgnoreReply, JobSetPutReply, JobSetShowReply, RefreshReply } from '../commands/jobset-commands.js';
import type { DeleteCommand, IgnoreCommand, JobSetPutCommand, RefreshCommand } from '../commands/jobset-schemas.js';
import type { CancelAllCommand, CleanCommand, RetryAllCommand } from '../commands/schemas.js';
import type { SchedulePutCommand, TemplatePutCommand } from '../commands/schedule-schemas.js';
import type { ScheduleView, TemplateView } from '../schedules/sys-commands.js';

/** A reply without its `ok` (and the `replayed` flag of a write). */
function viewOf<T extends object>(reply: T & { ok?: boolean; replayed?: boolean }): T {
  const { ok: _ok, replayed: _replayed, ...view } = reply;
  return view as T;
}

export interface ClientOptions {
  /** @defaultValue 'nats://127.0.0.1:4222' */
  readonly servers?: string | string[];
  /** Use this connection; `close()` leaves it open. */
  readonly nc?: NatsConnection;
  /** How long a command may take. @defaultValue 30000 */
  readonly requestTimeoutMs?: number;
  /**
   * A node in this process (`startNode`'s result): commands are answered by it with no NATS round
   * trip, and live events are its own commits handed over in process and other leaders' read on
   * the connection it publishes on (README "Embedded workers"). Takes the place of `servers` and
   * `nc`; close the client before the node.
   */
  readonly local?: { readonly nc: NatsConnection; readonly commands: LocalCommands; readonly live?: LocalLive };
}

export type SubmitJob = JobSpec;
export interface SubmitResult {
  readonly job_id: string;
  readonly status: string;
  readonly created: boolean;
}
/** A job's detail; `fan_out` for a fan-out job: its quorum and each node's entry (README "Fan-out jobs"). */
export type JobDetail = ReturnType<typeof toDetail> & { readonly fan_out?: FanOutView };

/** An event's place in the log: its commit's stream sequence and its index in the commit. */
export interface EventPosition {
  readonly seq: number;
  readonly index: number;
}

export interface EventsOptions {
  /** Only this queue's events (its partition: jobs and their runs, the queue, its reservation). */
  readonly queue?: string;
  /** Only these event types. */
  readonly types?: readonly string[];
  /**
   * Where to start: 'now' (default), 'all', a commit's stream sequence (all its events), a
   * position `{ seq, index }` (that event and every later one), or a Date (the first commit
   * stored at or after it).
   */
  readonly from?: 'now' | 'all' | number | EventPosition | Date;
  /** Stop iterating when aborted. */
  readonly signal?: AbortSignal;
}

/**
 * One event of the log. Several events share a commit, so several items share `seq`; `index`
 * orders them, and `position` is both in one number (machines/envelope.ts: `seq * 65536 +
 * index`), the order of the whole log and the fencing token of a `job.claimed`.
 */
export interface RecordedEvent {
  /** Stream sequence of the commit holding the event. */
  readonly seq: number;
  /** The event's index in its commit. */
  readonly index: number;
  readonly position: Position;
  /** The event's live subject: `docket.evt.<kind>.<queue>.<id>`, or `docket.evt.<kind>.<id>` for sys aggregates. */
  readonly subject: string;
  readonly event: Envelope;
}

/** RFC 3339 with microseconds: a millisecond alone cannot order a call and a store in the same ms. */
function toMicrosecondIso(ms: number): string {
  const whole = Math.floor(ms);
  const micros = Math.floor((ms - whole) * 1000);
  return new Date(whole).toISOString().replace('Z', `${String(micros).padStart(3, '0')}Z`);
}

/** An async iterable over the log's events; `ready` resolves once events from its start point will be delivered. */
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
    else if (from instanceof Date) start = { deliver_policy: DeliverPolicy.StartTime, opt_start_time: from.toISOString() };
    else start = { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from.seq };
    const filter = this.options.queue === undefined ? LOG_SUBJECTS : subjects.partition(queuePartition(this.options.queue));
    const consumer = await js.consumers.get(STREAM, { filter_subjects: filter, ...start });
    this.messages = await consumer.consume(pullLimit(nc));
    if (this.closed) await this.messages.close();
    this.options.signal?.addEventListener('abort', () => void this.close(), { once: true });
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<RecordedEvent> {
    await this.ready;
    const types = this.options.types === undefined ? undefined : new Set(this.options.types);
    const from = this.options.from;
    // A start inside a commit: the events before the index in that commit are not asked for.
    const skip = typeof from === 'object' && !(from instanceof Date) ? from : null;
    try {
      for await (const msg of this.messages!) {
        let events: readonly unknown[];
        try {
          // One parse per commit; events are shape-checked one by one, so a bad one hides no other.
          events = decodeCommit(msg.data).events;
        } catch {
          continue;
        }
        const seq = msg.seq;
        const first = skip !== null && seq === skip.seq ? skip.index : 0;
        for (let index = first; index < events.length; index++) {
          const value = events[index];
          if (envelopeProblem(value) !== null) continue;
          const event = value as Envelope;
          if (types && !types.has(event.type)) continue;
          // The live subject DESIGN gives the event (the SDK reads the log, so it derives it); an
          // id no subject can hold is a bad event, skipped like one of the wrong shape.
          let subject: string;
          try {
            subject = subjects.event(event.aggregate.kind, event.queue, event.aggregate.id);
          } catch {
            continue;
          }
          yield { seq, index, position: positionOf(seq, index), subject, event };
        }
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
  private readonly requests: Requester;
  private constructor(
    readonly nc: NatsConnection,
    private readonly ownsConnection: boolean,
    private readonly options: ClientOptions,
  ) {
    this.timeout = options.requestTimeoutMs ?? 30_000;
    this.requests = new Requester(nc);
  }

  static async connect(options: ClientOptions = {}): Promise<Client> {
    if (options.local) return new Client(options.local.nc, false, options);
    if (options.nc) return new Client(options.nc, false, options);
    const nc = await connectNats(options.servers === undefined ? { name: 'docket-client' } : { servers: options.servers, name: 'docket-client' });
    return new Client(nc, true, options);
  }

  /** Sends `docket.cmd.<verb>` and returns the reply's fields, or throws the typed DocketError. */
  async request<T>(verb: string, body: unknown): Promise<T> {
    const data = requestBytes(this.nc, body);
    const { local } = this.options;
    const replyData = local ? await local.commands.local(verb, data, this.timeout) : (await this.requests.request(subjects.command(verb), data, this.timeout)).data;
    return replyFields<T>(replyData);
  }

  /**
   * The next fire times of a cron (5 fields, or 6 with seconds first) read in a time zone
   * (docket.cmd.schedule.preview): ISO-8601 UTC instants after `from` (default: the node's now).
   */
  async previewSchedule(cron: string, options: { timezone?: string; from?: string; count?: number } = {}): Promise<{ times: string[]; timezone: string }> {
    const { times, timezone } = await this.request<{ times: string[]; timezone: string }>('schedule.preview', { cron, ...options });
    return { times, timezone };
  }

  // --- templates and schedules (partition sys; README "Schedules and templates") ---------------

  /** Creates or revises a template (each put is its next revision). */
  async putTemplate(template: TemplatePutCommand): Promise<TemplateView> {
    return viewOf(await this.request<TemplateView & { replayed: boolean }>('template.put', template));
  }

  /** Archives a template: it refuses new jobs; schedules naming it miss their ticks. */
  async archiveTemplate(name: string, options: { id?: string } = {}): Promise<TemplateView> {
    return viewOf(await this.request<TemplateView & { replayed: boolean }>('template.archive', { ...options, name }));
  }

  async getTemplate(name: string): Promise<TemplateView> {
    return viewOf(await this.request<TemplateView>('template.get', { name }));
  }

  async listTemplates(): Promise<TemplateView[]> {
    return (await this.request<{ templates: TemplateView[] }>('template.list', {})).templates;
  }

  /** Creates or revises a schedule: `template` (a template's name) or `job`, a cron, a zone and policies. */
  async putSchedule(schedule: SchedulePutCommand): Promise<ScheduleView> {
    return viewOf(await this.request<ScheduleView & { replayed: boolean }>('schedule.put', schedule));
  }

  async enableSchedule(name: string, options: { id?: string } = {}): Promise<ScheduleView> {
    return viewOf(await this.request<ScheduleView & { replayed: boolean }>('schedule.enable', { ...options, name }));
  }

  async disableSchedule(name: string, options: { id?: string; note?: string } = {}): Promise<ScheduleView> {
    return viewOf(await this.request<ScheduleView & { replayed: boolean }>('schedule.disable', { ...options, name }));
  }

  async deleteSchedule(name: string, options: { id?: string } = {}): Promise<ScheduleView> {
    return viewOf(await this.request<ScheduleView & { replayed: boolean }>('schedule.delete', { ...options, name }));
  }

  /** Fires a schedule now, outside its cron; with `id` a resend fires once. */
  async triggerSchedule(name: string, options: { id?: string } = {}): Promise<{ schedule: string; tick: string; job_id: string; replayed: boolean }> {
    const { schedule, tick, job_id, replayed } = await this.request<{ schedule: string; tick: string; job_id: string; replayed: boolean }>('schedule.trigger', { ...options, name });
    return { schedule, tick, job_id, replayed };
  }

  /** Fires each past tick in [from, to] that has no job yet. */
  async backfillSchedule(name: string, from: string, to: string, options: { id?: string } = {}): Promise<{ schedule: string; fired: string[]; skipped: string[]; job_ids: string[]; replayed: boolean }> {
    const { schedule, fired, skipped, job_ids, replayed } = await this.request<{ schedule: string; fired: string[]; skipped: string[]; job_ids: string[]; replayed: boolean }>('schedule.backfill', { ...options, name, from, to });
    return { schedule, fired, skipped, job_ids, replayed };
  }

  async getSchedule(name: string): Promise<ScheduleView> {
    return viewOf(await this.request<ScheduleView>('schedule.get', { name }));
  }

  /** The schedules (all but deleted ones, or those of one status). */
  async listSchedules(options: { status?: 'enabled' | 'disabled' | 'deleted' } = {}): Promise<ScheduleView[]> {
    return (await this.request<{ schedules: ScheduleView[] }>('schedule.list', options)).schedules;
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

  /** Makes a delayed job due now (its run_at becomes the node's now; its place in the order stays). */
  async promote(jobId: string, options: { id?: string } = {}): Promise<{ job_id: string; status: string; run_at: string }> {
    const { job_id, status, run_at } = await this.request<{ job_id: string; status: string; run_at: string }>('promote', { job_id: jobId, ...options });
    return { job_id, status, run_at };
  }

  /**
   * Bulk actions on a queue, one event per job, on its leader (`dry_run: true` only counts). With
   * `id` a resend answers the first result. A bulk command on many jobs may take longer than one
   * request timeout: give the client a `requestTimeoutMs` to suit.
   */
  async retryAll(command: RetryAllCommand): Promise<BulkReply> {
    const { ok: _ok, ...reply } = await this.request<BulkReply & { ok: true }>('retry_all', command);
    return reply;
  }

  async cancelAll(command: CancelAllCommand): Promise<BulkReply> {
    const { ok: _ok, ...reply } = await this.request<BulkReply & { ok: true }>('cancel_all', command);
    return reply;
  }

  async clean(command: CleanCommand): Promise<BulkReply> {
    const { ok: _ok, ...reply } = await this.request<BulkReply & { ok: true }>('clean', command);
    return reply;
  }

  /**
   * Makes the queue a job set, or replaces its definition (DataJoint's jobs table: a key source,
   * an optional target, settings). A database URL must not hold a password: give password_env.
   */
  async putJobSet(command: JobSetPutCommand): Promise<JobSetPutReply> {
    const { ok: _ok, ...reply } = await this.request<JobSetPutReply & { ok: true }>('jobset.put', command);
    return reply;
  }

  /** Refreshes a job set (seed 000's jobs.refresh) on its leader: `{added, removed, orphaned, re_pended}`. */
  async refresh(command: RefreshCommand): Promise<RefreshReply> {
    const { ok: _ok, ...reply } = await this.request<RefreshReply & { ok: true }>('refresh', command);
    return reply;
  }

  /** Ignores a key of a job set (seed 000's jobs.ignore), also one that has no job yet. */
  async ignore(command: IgnoreCommand): Promise<IgnoreReply> {
    const { ok: _ok, ...reply } = await this.request<IgnoreReply & { ok: true }>('ignore', command);
    return reply;
  }

  /** Removes a job set's jobs matching key, status and restrict (running ones excepted): the next refresh adds their keys again. */
  async deleteJobs(command: DeleteCommand): Promise<DeleteReply> {
    const { ok: _ok, ...reply } = await this.request<DeleteReply & { ok: true }>('delete', command);
    return reply;
  }

  /** A job set's definition, progress in DataJoint's terms and `remaining` (reads its sources unless `remaining: false`). */
  async showJobSet(queue: string, options: { remaining?: boolean } = {}): Promise<JobSetShowReply> {
    const { ok: _ok, ...reply } = await this.request<JobSetShowReply & { ok: true }>('jobset.show', { queue, ...options });
    return reply;
  }

  async get(jobId: string): Promise<JobDetail> {
    const { job, run, history, fan_out } = await this.request<JobDetail>('get', { job_id: jobId });
    return fan_out === undefined ? { job, run, history } : { job, run, history, fan_out };
  }

  async list(query: { queue: string; status?: string; limit?: number; cursor?: string }): Promise<{ jobs: JobSummary[]; next_cursor: string | null }> {
    const { jobs, next_cursor } = await this.request<{ jobs: JobSummary[]; next_cursor: string | null }>('list', query);
    return { jobs, next_cursor };
  }

  async progress(queue?: string): Promise<QueueProgress[]> {
    const { queues } = await this.request<{ queues: QueueProgress[] }>('progress', queue === undefined ? {} : { queue });
    return queues;
  }

  /** Creates a group: members (submit bodies of any queues) run one after another or together. */
  async createGroup(group: { mode: 'sequential' | 'parallel'; on_failure?: 'stop' | 'continue' | 'skip'; name?: string; id?: string; jobs: SubmitJob[] }): Promise<{ group_id: string; jobs: string[] }> {
    const { group_id, jobs } = await this.request<{ group_id: string; jobs: string[] }>('group.create', group);
    return { group_id, jobs };
  }

  /** A group, its derived status and its members. */
  async group(groupId: string): Promise<Record<string, unknown>> {
    const { ok: _ok, ...group } = await this.request<Record<string, unknown>>('group.get', { group_id: groupId });
    return group;
  }

  /** Pauses a queue: it takes submits and hands out nothing until resumed. `create` configures a queue with no job yet. */
  async pause(queue: string, options: { reason?: string; actor?: string; id?: string; create?: boolean } = {}): Promise<QueueView> {
    return this.request<QueueView>('pause', { queue, ...options });
  }

  async resume(queue: string, options: { actor?: string; id?: string } = {}): Promise<QueueView> {
    return this.request<QueueView>('resume', { queue, ...options });
  }

  /** Changes a queue's flow-control settings (a field left out keeps its value; null clears it). */
  async setQueue(queue: string, settings: QueueSettingsChange & { actor?: string; id?: string; create?: boolean }): Promise<QueueView> {
    return this.request<QueueView>('queue.set', { queue, ...settings });
  }

  /** A queue's state, settings, active reservation, and what holds its waiting jobs. */
  async showQueue(queue: string): Promise<QueueShow> {
    return this.request<QueueShow>('queue.show', { queue });
  }

  /** Takes the queue's reservation; with `job`, that job is created and claimed under it (direct execution). */
  async reserve(queue: string, options: { holder: string; ttl_ms: number; job?: Omit<SubmitJob, 'queue'>; lease_ms?: number; id?: string; create?: boolean }): Promise<Reserved> {
    const { job, ...rest } = options;
    return this.request<Reserved>('reserve', { queue, ...rest, ...(job === undefined ? {} : { job: { ...job, queue } }) });
  }

  async release(reservationId: string, options: { id?: string } = {}): Promise<{ reservation_id: string; queue: string; released: true }> {
    return this.request('release', { reservation_id: reservationId, ...options });
  }

  async renew(reservationId: string, ttlMs: number, options: { id?: string } = {}): Promise<ReservationView> {
    return this.request<ReservationView>('renew', { reservation_id: reservationId, ttl_ms: ttlMs, ...options });
  }

  async reservations(queue?: string): Promise<ReservationView[]> {
    const { reservations } = await this.request<{ reservations: ReservationView[] }>('reservations', queue === undefined ? {} : { queue });
    return reservations;
  }

  /**
   * Events from the log, in log order: read from the stored commits and unpacked, each with its
   * position. Starts now unless `from` says otherwise: "now" is the time of this call (commits
   * stored from then on), not when iteration begins, and `ready` resolves once the consumer is
   * in place.
   */
  events(options: EventsOptions = {}): EventStream {
    return new EventStream(this.nc, options);
  }

  /**
   * Live events: each job event a leader commits, with its position, read from the commits the
   * leader publishes on core NATS right after they are acknowledged (`docket.live.q.<queue>`);
   * a client given `local: node` also takes that node's commits straight from it. Not stored:
   * what is published while nobody listens is gone; use `events()` for a durable, gap-free read.
   * The subscription is in place once `ready` resolves.
   */
  live(options: LiveOptions = {}): LiveEvents {
    return readLive(this.nc, this.options.local?.live, options);
  }

  async close(): Promise<void> {
    if (this.ownsConnection) await this.nc.drain();
    else this.requests.close();
  }
}

export type { JobEvent };
