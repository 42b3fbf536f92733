/**
 * The one door for writes: validate -> (forwarded to the partition's leader) -> decide (the
 * machines) -> the partition's writer -> folded at the commit's ack. Command handlers, worker
 * handlers and reactors all decide through `createJob` and `transitionJob`; only the partition
 * writers (src/store/partition-writer.ts) publish to DOCKET.
 */
import { decideAggregate, decideJob, evolveJob, INITIAL_JOB_STATE, type AggregateEvent, type EventMeta, type FoldState, type JobEvent, type Position } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { toIso } from '../clock.js';
import { ConflictError, excerpt, InvalidTransitionError, NotFoundError, StaleRunError } from '../errors.js';
import { commandHash, eventIdFor, eventIdOf, type IdSource } from '../ids.js';
import type { Logger } from '../logger.js';
import type { KeyIndex } from '../projections/key-index.js';
import type { JobNodeIndex } from '../projections/job-nodes.js';
import type { PartitionWriter } from '../store/partition-writer.js';
import { historyOf, holdsEvent, isSubmitOf, type JobRecord, type JobStore } from '../store/job-store.js';
import type { LogTail } from '../store/log-tail.js';
import { readEvictedJob, type CommitReader } from '../store/evicted-jobs.js';
import type { EvictedJob } from '../store/evicted-index.js';
import { SYS_LEASE } from '../nats/subjects.js';
import type { AggregateRecord, AggregateStore } from '../store/aggregate-store.js';
import type { HandedOff } from '../dispatch/dispatcher.js';

export interface CommandContext {
  readonly store: JobStore;
  /** Every non-job aggregate (queues, reservations, ...), folded from the same commits. */
  readonly aggregates: AggregateStore;
  readonly tail: LogTail;
  readonly keys: KeyIndex;
  /** Fan-out jobs' nodes and the worker nodes seen per queue (absent: fan-out is refused as having no nodes). */
  readonly jobNodes?: JobNodeIndex;
  readonly clock: Clock;
  readonly ids: IdSource;
  /** This node's name, written into every event's meta. */
  readonly node: string;
  /**
   * The writer of a queue's partition (or, for SYS_LEASE, of `sys`), once it may decide (folded to the partition's tip).
   * Rejects with UnavailableError on a node that does not lead the queue: commands reach the
   * leader first (src/cluster/partition-router.ts). Not a promise when the writer may decide now.
   */
  writer(queue: string): PartitionWriter | Promise<PartitionWriter>;
  /**
   * Waits until this node has folded everything the stream held when called (bounded). Used
   * before answering from a possibly stale view: not_found, or "the key's job is live".
   */
  catchUp(): Promise<void>;
  /**
   * Hands submits to the claims parked at the queue's dispatcher, when this node leads the queue:
   * each handed submit is appended with its claim (one commit), the rest are the caller's to append.
   */
  handOff?(queue: string, writer: PartitionWriter, submits: readonly JobEventOf<'job.submitted'>[]): readonly HandedOff[];
  /** Reads a commit by stream sequence: how an evicted job's body is read back (absent: evicted jobs stay evicted). */
  readonly readCommit?: CommitReader;
  readonly log: Logger;
}

type JobEventOf<T extends JobEvent['type']> = Extract<JobEvent, { type: T }>;

/** What a command with an id leaves in its events' meta: the id and its body's hash. */
export type CommandMeta = Pick<EventMeta, 'command_id' | 'command_hash'>;

/** The meta of a command's events: empty without a command id. */
export function commandMetaOf(commandId: string | undefined, body: unknown): CommandMeta {
  return commandId === undefined ? {} : { command_id: commandId, command_hash: commandHash(body) };
}

/**
 * A resent command (its id found in the log) must carry the body it was first sent with: a
 * command id reused for another body is refused, as payment APIs treat idempotency keys.
 */
export function assertSameCommand(stored: string | null | undefined, meta: CommandMeta): void {
  if (meta.command_hash === undefined || meta.command_hash === stored) return;
  const id = meta.command_id ?? '';
  throw new ConflictError(`command id ${excerpt(id)} was already used with another body; send a new id for a new request`, { details: { command_id: excerpt(id) } });
}

/** The job an event belongs to. */
export interface JobRef {
  readonly queue: string;
  readonly jobId: string;
}

/** Builds a job event stamped with the node's clock. */
export function envelope<T extends JobEvent['type']>(
  ctx: Pick<CommandContext, 'node' | 'clock'>,
  type: T,
  job: JobRef,
  id: string,
  data: JobEventOf<T>['data'],
  meta: Omit<EventMeta, 'node'> = {},
  time: string = toIso(ctx.clock.now()),
): JobEventOf<T> {
  return { id, type, time, aggregate: { kind: 'job', id: job.jobId }, queue: job.queue, data, meta: { ...meta, node: ctx.node } } as JobEventOf<T>;
}

function loaded(ctx: CommandContext, jobId: string): JobRecord {
  const record = ctx.store.get(jobId);
  if (!record) throw new Error(`job ${jobId} missing after its commit`);
  return record;
}

export interface Created {
  readonly record: JobRecord;
  /** false when the job already existed (an earlier send, or another command, created it). */
  readonly created: boolean;
}

/**
 * Creates a job whose id is `jobId` (derived or random). The partition's single writer makes
 * the id unique: a second create of the same id waits for the first, then finds it.
 */
export async function createJob(ctx: CommandContext, event: JobEventOf<'job.submitted'>): Promise<Created> {
  const queue = event.queue ?? '';
  const jobId = event.data.job_id;
  const writer = await ctx.writer(queue);
  // Decisions rest on committed state: wait out the job's events still in the writer. From the
  // check to append() nothing awaits, so no other decision on this job comes between.
  while (writer.isBusy(jobId)) await writer.settled(jobId);
  // A resent submit: its event (this id) already created a job, perhaps under another derived id.
  // No await unless a job was found (the append below must follow the checks without one).
  const found = jobOfSubmitEvent(ctx, event.id);
  const mine = found instanceof Promise ? await found : found;
  if (mine) {
    assertSameCommand(mine.commandHash, event.meta);
    return { record: mine, created: true };
  }
  // A job of this id whose body was evicted: read back, it answers as it would have (no append follows this await).
  const evicted = ctx.store.get(jobId) === undefined ? ctx.store.evicted(jobId) : undefined;
  const existing = evicted === undefined ? ctx.store.get(jobId) : await reinstateEvicted(ctx, evicted);
  if (existing) {
    const resent = isSubmitOf(existing, event.id);
    if (resent) assertSameCommand(existing.commandHash, event.meta);
    return { record: existing, created: resent };
  }
  const decision = decideJob(INITIAL_JOB_STATE, event);
  if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { job_id: jobId } });
  const [handed] = ctx.handOff?.(queue, writer, [event]) ?? [];
  await (handed ? handed.committed : writer.append([event]));
  return { record: ctx.store.bySubmitEventId(event.id) ?? loaded(ctx, jobId), created: true };
}

/**
 * Creates many jobs whose ids are random (plain submits: no key, no command id), so no earlier
 * job can hold them: each is decided by the machines, then all go to the writer together (one
 * promise per commit's worth, not one per job). Answers each with its record or the error its
 * commit failed with.
 */
export function createNewJobs(ctx: CommandContext, queue: string, events: readonly JobEventOf<'job.submitted'>[]): Promise<(JobRecord | Error)[]> {
  // No await when the writer is at hand (transitionJob says why).
  const ready = ctx.writer(queue);
  return ready instanceof Promise ? ready.then((writer) => appendNewJobs(ctx, queue, writer, events)) : appendNewJobs(ctx, queue, ready, events);
}

/**
 * createNewJobs once the writer is at hand: everything up to the writer's queueing runs
 * synchronously (the caller's checks that no job holds these ids stay true until then).
 */
export async function appendNewJobs(ctx: CommandContext, queue: string, writer: PartitionWriter, events: readonly JobEventOf<'job.submitted'>[]): Promise<(JobRecord | Error)[]> {
  for (const event of events) {
    const decision = decideJob(INITIAL_JOB_STATE, event);
    if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { job_id: event.data.job_id } });
  }
  // Parked claims take the head of the batch in the same commits; the rest are appended as usual.
  const handed = ctx.handOff?.(queue, writer, events) ?? [];
  const isHanded = new Set(handed.map((h) => h.index));
  const rest = handed.length === 0 ? events : events.filter((_, i) => !isHanded.has(i));
  const [handedPositions, restPositions] = await Promise.all([
    Promise.all(handed.map((h) => h.committed.then((position): Position | Error => position, (err: unknown) => (err instanceof Error ? err : new Error(String(err)))))),
    writer.appendEach(rest),
  ]);
  const positions = new Array<Position | Error>(events.length);
  handed.forEach((h, k) => (positions[h.index] = handedPositions[k]!));
  let next = 0;
  events.forEach((_, i) => {
    if (!isHanded.has(i)) positions[i] = restPositions[next++]!;
  });
  return positions.map((position, i) => (position instanceof Error ? position : loaded(ctx, events[i]!.data.job_id)));
}

export interface Transitioned {
  readonly record: JobRecord;
  readonly event: JobEvent;
  /** true when this command's event was already in the job's history (a resent command). */
  readonly replayed: boolean;
  /** The event's position in the log. */
  readonly position: Position;
}

/**
 * An evicted job's body read back from the log and put back in the store, so a command on it
 * is decided as before its eviction (a resend finds its own event; a retry finds its job).
 * The next sweep evicts it again.
 */
export async function reinstateEvicted(ctx: Pick<CommandContext, 'store' | 'readCommit'>, entry: EvictedJob): Promise<JobRecord> {
  if (ctx.readCommit === undefined) throw new NotFoundError('the job was evicted from memory and this node cannot read the log');
  const record = await readEvictedJob(ctx.readCommit, entry);
  ctx.store.reinstate(record);
  return ctx.store.get(record.jobId) ?? record;
}

/**
 * The job the job.submitted with this id created: in memory, or evicted and read back. Awaits
 * only when it reads one back: a caller that goes on to append relies on no await between its
 * checks and the append when nothing was found.
 */
export function jobOfSubmitEvent(ctx: Pick<CommandContext, 'store' | 'readCommit'>, eventId: string): JobRecord | Promise<JobRecord> | undefined {
  const record = ctx.store.bySubmitEventId(eventId);
  if (record) return record;
  const entry = ctx.store.evictedBySubmitEventId(eventId);
  return entry === undefined ? undefined : reinstateEvicted(ctx, entry);
}

/** The job, looked up again once caught up when this node has not seen it (created elsewhere a moment ago); an evicted job is read back. */
export function findJob(ctx: CommandContext, jobId: string): JobRecord | Promise<JobRecord> {
  // Not a promise when the job is in memory (nearly every call): no async frame on the job path.
  return ctx.store.get(jobId) ?? findAbsentJob(ctx, jobId);
}

async function findAbsentJob(ctx: CommandContext, jobId: string): Promise<JobRecord> {
  const entry = ctx.store.evicted(jobId);
  if (entry) return reinstateEvicted(ctx, entry);
  await ctx.catchUp();
  const record = ctx.store.get(jobId);
  if (!record) throw new NotFoundError(`job ${jobId} not found`, { details: { job_id: jobId } });
  return record;
}

/**
 * Decides and commits one event on an existing job. `build` makes the candidate from the
 * current record. With a command id, a resend finds its own event in the history and returns
 * the first result.
 */
export async function transitionJob(
  ctx: CommandContext,
  jobId: string,
  commandId: string | undefined,
  build: (record: JobRecord, eventId: string) => JobEvent,
  /** Called once the event is accepted and handed to the writer (before its commit is stored). */
  onDecided?: () => void,
  /**
   * Events that follow the decided one on the same job in the same commit (a job set's
   * succeeded job removed at once, keep_completed false), each decided on the state the ones
   * before leave.
   */
  follow?: (record: JobRecord, decided: JobEvent) => readonly JobEvent[],
): Promise<Transitioned> {
  const eventId = commandId === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(commandId, jobId);
  // Awaited only when promises (findJob and writer are not, for a job in memory on a node that
  // may decide now): an await of a plain value is still a turn of the microtask queue.
  const found = findJob(ctx, jobId);
  const { queue } = found instanceof Promise ? await found : found;
  const ready = ctx.writer(queue);
  const writer = ready instanceof Promise ? await ready : ready;
  // As in createJob: no await from this check to append().
  while (writer.isBusy(jobId)) await writer.settled(jobId);
  const record = loaded(ctx, jobId);
  const candidate = build(record, eventId);
  // A resent command: its event is in the history already (the first result is the answer).
  if (holdsEvent(record, eventId)) {
    const earlier = historyOf(record).find((h) => h.id === eventId)!;
    assertSameCommand(earlier.commandHash, candidate.meta);
    onDecided?.();
    return { record, event: candidate, replayed: true, position: earlier.seq };
  }
  const decision = decideJob(record.state, candidate);
  if (!decision.ok) {
    const Cls = decision.code === 'stale_run' ? StaleRunError : InvalidTransitionError;
    throw new Cls(decision.reason, { details: { job_id: jobId, status: record.state.job.value } });
  }
  const following = follow?.(record, candidate) ?? [];
  let state = following.length === 0 ? record.state : evolveJob(record.state, candidate);
  for (const next of following) {
    const followed = state === null ? null : decideJob(state, next);
    if (followed === null || !followed.ok) throw new InvalidTransitionError(followed?.reason ?? `cannot follow ${candidate.type} with ${next.type}`, { details: { job_id: jobId } });
    state = evolveJob(state!, next);
  }
  const appended = writer.append([candidate, ...following]);
  onDecided?.();
  const [position] = await appended;
  return { record: loaded(ctx, jobId), event: candidate, replayed: false, position: position! };
}

type AggregateEventOf<T extends AggregateEvent['type']> = Extract<AggregateEvent, { type: T }>;

/** A non-job aggregate: its kind, id, and its queue (none for a `sys` aggregate: templates, schedules, groups). */
export interface AggregateRef<K extends AggregateEvent['aggregate']['kind'] = AggregateEvent['aggregate']['kind']> {
  readonly kind: K;
  readonly id: string;
  readonly queue?: string;
}

/** The leadership lease (and writer) of an aggregate's partition: its queue, or the sys partition's. */
export function leaseOf(ref: AggregateRef): string {
  return ref.queue ?? SYS_LEASE;
}

/** Builds an event of a non-job aggregate stamped with the node's clock. */
export function aggregateEnvelope<T extends AggregateEvent['type']>(
  ctx: Pick<CommandContext, 'node' | 'clock'>,
  type: T,
  ref: AggregateRef<AggregateEventOf<T>['aggregate']['kind']>,
  id: string,
  data: AggregateEventOf<T>['data'],
  meta: Omit<EventMeta, 'node'> = {},
): AggregateEventOf<T> {
  const event = { id, type, time: toIso(ctx.clock.now()), aggregate: { kind: ref.kind, id: ref.id }, data, meta: { ...meta, node: ctx.node } };
  return (ref.queue === undefined ? event : { ...event, queue: ref.queue }) as unknown as AggregateEventOf<T>;
}

export interface AggregateTransitioned<C> {
  readonly record: AggregateRecord<C>;
  readonly event: AggregateEvent;
  /** true when this command's event was already in the aggregate's history (a resent command). */
  readonly replayed: boolean;
  readonly position: Position;
}

/**
 * Decides and commits one event on a queue-partition aggregate (its queue's leader). As
 * transitionJob: decisions rest on committed state; a resent command (same id) finds its event
 * in the aggregate's recent history and returns the first result.
 */
export async function transitionAggregate<C>(
  ctx: CommandContext,
  ref: AggregateRef,
  commandId: string | undefined,
  build: (state: FoldState<C>, eventId: string) => AggregateEvent,
): Promise<AggregateTransitioned<C>> {
  const eventId = commandId === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(commandId, `${ref.kind}-${ref.id}`);
  const writer = await ctx.writer(leaseOf(ref));
  while (writer.isBusy(ref.id, ref.kind)) await writer.settled(ref.id, ref.kind);
  const before = ctx.aggregates.get<C>(ref.kind, ref.id);
  const candidate = build(ctx.aggregates.stateOf<C>(ref.kind, ref.id), eventId);
  const earlier = before?.history.find((h) => h.id === eventId);
  if (before && earlier) {
    assertSameCommand(earlier.commandHash, candidate.meta);
    return { record: before, event: candidate, replayed: true, position: earlier.seq };
  }
  const decision = decideAggregate(ctx.aggregates.stateOf(ref.kind, ref.id), candidate);
  if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { [ref.kind]: ref.id, status: ctx.aggregates.stateOf(ref.kind, ref.id).value } });
  const [position] = await writer.append([candidate]);
  const record = ctx.aggregates.get<C>(ref.kind, ref.id);
  if (!record) throw new Error(`${ref.kind} ${ref.id} missing after its commit`);
  return { record, event: candidate, replayed: false, position: position! };
}
