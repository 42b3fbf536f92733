/**
 * The one door for writes: validate -> load -> decide (the machines) -> guarded append -> apply.
 * Command handlers, worker handlers and reactors all append through `createJob` and
 * `transitionJob`; only src/store/event-store.ts publishes to DOCKET.
 */
import {
  decideJob,
  ENVELOPE_VERSION,
  INITIAL_JOB_STATE,
  type EventMeta,
  type JobEvent,
} from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { toIso } from '../clock.js';
import { InvalidTransitionError, NotFoundError, StaleRunError, ConflictError } from '../errors.js';
import { eventIdFor, eventIdOf, type IdSource } from '../ids.js';
import type { Logger } from '../logger.js';
import { subjects } from '../nats/subjects.js';
import type { KeyIndex } from '../projections/key-index.js';
import { AppendConflictError, type EventStore } from '../store/event-store.js';
import { holdsEvent, isSubmitOf, type JobRecord, type JobStore } from '../store/job-store.js';
import type { LogTail } from '../store/log-tail.js';
import { Limits } from './limits.js';

export interface CommandContext {
  readonly store: JobStore;
  readonly tail: LogTail;
  readonly events: EventStore;
  readonly keys: KeyIndex;
  readonly clock: Clock;
  readonly ids: IdSource;
  /** This node's name, written into every event's meta. */
  readonly node: string;
  /**
   * Waits until this node has folded everything the stream held when called (bounded). Used
   * before answering from a possibly stale view: not_found, or "the key's job is live".
   */
  catchUp(): Promise<void>;
  readonly log: Logger;
}

type JobEventOf<T extends JobEvent['type']> = Extract<JobEvent, { type: T }>;

/** Builds an envelope stamped with the node's clock. */
export function envelope<T extends JobEvent['type']>(
  ctx: CommandContext,
  type: T,
  queue: string,
  id: string,
  data: JobEventOf<T>['data'],
  meta: Partial<EventMeta> = {},
  time: string = toIso(ctx.clock.now()),
): JobEventOf<T> {
  return { v: ENVELOPE_VERSION, id, type, time, queue, data, meta: { ...meta, node: ctx.node } } as JobEventOf<T>;
}

/** Appends one event and folds it into this node; resolves with its stream sequence. */
async function appendAndFold(ctx: CommandContext, queue: string, jobId: string, expectedSeq: number, event: JobEvent): Promise<number> {
  const subject = subjects.job(queue, jobId);
  const appended = await ctx.events.append({ subject, event, expectedSeq });
  if (appended.duplicate) {
    // The stream already held this event id (the first send of it, wherever it went): what it
    // stored, not this copy, is the truth.
    await ctx.tail.waitFor(appended.seq);
  } else {
    // Read-your-writes without waiting for the tail (which, following, skips its copy).
    ctx.store.apply({ seq: appended.seq, subject, queue, jobId, event });
    ctx.tail.appended(appended.seq);
  }
  return appended.seq;
}

async function appendAndApply(ctx: CommandContext, queue: string, jobId: string, expectedSeq: number, event: JobEvent): Promise<JobRecord> {
  const seq = await appendAndFold(ctx, queue, jobId, expectedSeq, event);
  const record = ctx.store.get(jobId);
  if (!record) throw new Error(`job ${jobId} missing after its append at ${seq}`);
  return record;
}

export interface Created {
  readonly record: JobRecord;
  /** false when the job already existed (another node or an earlier send created it). */
  readonly created: boolean;
}

/**
 * Creates a job whose id is `jobId` (derived or random). Creating expects sequence 0, so two
 * nodes racing on one derived id get one job; the loser answers with the existing one.
 */
export async function createJob(ctx: CommandContext, event: JobEventOf<'job.submitted'>): Promise<Created> {
  const queue = event.queue ?? '';
  const jobId = event.data.job_id;
  // A resent submit: its event (this id) already created a job, perhaps under another derived id.
  const mine = ctx.store.bySubmitEventId(event.id);
  if (mine) return { record: mine, created: true };
  const existing = ctx.store.get(jobId);
  if (existing) return { record: existing, created: isSubmitOf(existing, event.id) };
  const decision = decideJob(INITIAL_JOB_STATE, event);
  if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { job_id: jobId } });
  try {
    const seq = await appendAndFold(ctx, queue, jobId, 0, event);
    const record = ctx.store.bySubmitEventId(event.id) ?? ctx.store.get(jobId);
    if (!record) throw new Error(`job ${jobId} missing after its append at ${seq}`);
    return { record, created: true };
  } catch (err) {
    if (!(err instanceof AppendConflictError)) throw err;
    await ctx.tail.waitFor(err.actualSeq);
    const record = ctx.store.get(jobId);
    if (!record) throw new ConflictError(`job ${jobId} exists on the stream but could not be loaded`, { cause: err });
    return { record, created: isSubmitOf(record, event.id) };
  }
}

export interface Transitioned {
  readonly record: JobRecord;
  readonly event: JobEvent;
  /** true when this command's event was already in the job's history (a resent command). */
  readonly replayed: boolean;
}

/**
 * Decides and appends one event on an existing job. `build` makes the candidate from the current
 * record; after a lost race the job is reloaded (the tail passes the winner) and decided again.
 * With a command id, a resend finds its own event in the history and returns the first result.
 */
export async function transitionJob(
  ctx: CommandContext,
  jobId: string,
  commandId: string | undefined,
  build: (record: JobRecord, eventId: string) => JobEvent,
): Promise<Transitioned> {
  const eventId = commandId === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(commandId, jobId);
  for (let attempt = 0; ; attempt++) {
    let record = ctx.store.get(jobId);
    if (!record) {
      // Perhaps created on another node a moment ago: look again once caught up.
      await ctx.catchUp();
      record = ctx.store.get(jobId);
    }
    if (!record) throw new NotFoundError(`job ${jobId} not found`, { details: { job_id: jobId } });
    const candidate = build(record, eventId);
    if (holdsEvent(record, eventId)) return { record, event: candidate, replayed: true };
    const decision = decideJob(record.state, candidate);
    if (!decision.ok) {
      const Cls = decision.code === 'stale_run' ? StaleRunError : InvalidTransitionError;
      throw new Cls(decision.reason, { details: { job_id: jobId, status: record.state.job.value } });
    }
    try {
      const next = await appendAndApply(ctx, record.queue, jobId, record.seq, candidate);
      return { record: next, event: candidate, replayed: false };
    } catch (err) {
      if (!(err instanceof AppendConflictError)) throw err;
      if (attempt + 1 >= Limits.MaxConflictRetries) throw err;
      // Another writer got there first: normal in a cluster, and handled here, so no warning.
      ctx.log.debug({ jobId, attempt, expectedSeq: err.expectedSeq, actualSeq: err.actualSeq }, 'append conflict, deciding again');
      await ctx.tail.waitFor(err.actualSeq);
    }
  }
}
