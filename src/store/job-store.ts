/**
 * Every job's current state, folded from the log with the fast fold derived from the machines.
 * It is the leader's state to decide against and the source every projection is derived from.
 * It holds committed events only: a partition's writer applies a commit's events once the
 * stream acknowledged it. Events may arrive twice on the node that appended them (from its own
 * ack and from the tail); the event's position makes the second a no-op.
 */
import { evolveJob, INITIAL_JOB_STATE, JOB_EVENT_TYPES, type Envelope, type JobEvent, type JobState, type Position } from '../../machines/index.js';
import { eventIdOf, isEventIdOf } from '../ids.js';

const JOB_TYPES = new Set<string>(JOB_EVENT_TYPES);

export interface HistoryEntry<T extends string = JobEvent['type']> {
  /** The event's position (machines/envelope.ts: commit sequence and index in one number). */
  readonly seq: Position;
  readonly id: string;
  readonly type: T;
  readonly time: string;
  /** The hash of the body of the command (with an id) that asked for it. */
  readonly commandHash?: string;
}

/** One job as folded. Kept small (one per job in memory): its subject is derived, not stored. */
export interface JobRecord {
  readonly jobId: string;
  readonly queue: string;
  readonly state: JobState;
  /** Position of the job's last event. */
  readonly seq: Position;
  /** Position of `job.submitted`: the last part of the queue order key. */
  readonly submitSeq: Position;
  /**
   * Id of `job.submitted`, the first event (its time is the context's created_at); null when it
   * is `e<job id>`, the id a plain submit (random job id, no command id) gets: most jobs, so the
   * string is not held twice. `submitIdOf` gives it either way.
   */
  readonly submitId: string | null;
  /** The hash of the submit item's body when its command had an id (a resend must match it). */
  readonly commandHash: string | null;
  /**
   * The events after `job.submitted`, oldest first. The first entry is not kept as an object:
   * it is derived from submitSeq, submitId and created_at (a queued job holds no history array).
   */
  readonly later: readonly HistoryEntry[];
}

/** The `later` of a job with no event after job.submitted (shared: most jobs hold no array). */
export const NO_EVENTS: readonly HistoryEntry[] = Object.freeze([]);

/** The submit event id of a plain submit: derived from the (random, unique) job id. */
export function plainSubmitId(jobId: string): string {
  return eventIdOf(jobId);
}

export function submitIdOf(record: JobRecord): string {
  return record.submitId ?? plainSubmitId(record.jobId);
}

/** Whether this event id is the job's job.submitted. */
export function isSubmitOf(record: JobRecord, eventId: string): boolean {
  return record.submitId === null ? isEventIdOf(eventId, record.jobId) : record.submitId === eventId;
}

/** A job's whole history, job.submitted first. */
export function historyOf(record: JobRecord): HistoryEntry[] {
  const first: HistoryEntry = { seq: record.submitSeq, id: submitIdOf(record), type: 'job.submitted', time: record.state.job.context.created_at };
  return [first, ...record.later];
}

/** Whether the event with this id is in the job's history (a resent command finds its own). */
export function holdsEvent(record: JobRecord, eventId: string): boolean {
  return isSubmitOf(record, eventId) || record.later.some((h) => h.id === eventId);
}

function historyEntry(seq: Position, event: JobEvent): HistoryEntry {
  const entry = { seq, id: event.id, type: event.type, time: event.time };
  return event.meta.command_hash === undefined ? entry : { ...entry, commandHash: event.meta.command_hash };
}

export interface RecordedJobEvent {
  /** The event's position in the log. */
  readonly seq: Position;
  readonly queue: string;
  readonly jobId: string;
  readonly event: JobEvent;
}

export interface JobChange {
  readonly before: JobRecord | undefined;
  readonly after: JobRecord;
  /** The event that made the change; undefined when a record is restored from a checkpoint. */
  readonly recorded: RecordedJobEvent | undefined;
}

export type ApplyResult = 'applied' | 'already_applied' | 'refused';

export type JobChangeListener = (change: JobChange) => void;

export class JobStore {
  private readonly jobs = new Map<string, JobRecord>();
  /**
   * job.submitted event id -> job id, for keyed jobs: a resent keyed submit finds what it created
   * even when the key has moved to another generation (another id). An unkeyed job's id is a
   * function of its command, so the job itself says whether a resend created it (submitId).
   */
  private readonly bySubmitEvent = new Map<string, string>();
  private readonly listeners: JobChangeListener[] = [];
  /** Events the machines refused while folding the log (a tampered log; `docket audit` names them). */
  refused = 0;

  get size(): number {
    return this.jobs.size;
  }

  get(jobId: string): JobRecord | undefined {
    return this.jobs.get(jobId);
  }

  /** The job created by the job.submitted event with this id, if any. */
  bySubmitEventId(eventId: string): JobRecord | undefined {
    const jobId = this.bySubmitEvent.get(eventId);
    return jobId === undefined ? undefined : this.jobs.get(jobId);
  }

  values(): IterableIterator<JobRecord> {
    return this.jobs.values();
  }

  onChange(listener: JobChangeListener): void {
    this.listeners.push(listener);
  }

  /** The kernel's folder interface (src/store/kernel.ts) for a store that knows only jobs. */
  applyEvent(position: Position, event: Envelope): ApplyResult | 'not_folded' {
    if (!(event.aggregate.kind === 'job' && event.queue !== undefined && JOB_TYPES.has(event.type))) return 'not_folded';
    return this.apply({ seq: position, queue: event.queue, jobId: event.aggregate.id, event: event as JobEvent });
  }

  /** Folds one recorded event into its job. Idempotent by the event's position. */
  apply(recorded: RecordedJobEvent): ApplyResult {
    const before = this.jobs.get(recorded.jobId);
    if (before && recorded.seq <= before.seq) return 'already_applied';
    const state = evolveJob(before?.state ?? INITIAL_JOB_STATE, recorded.event);
    if (state === null) {
      this.refused += 1;
      return 'refused';
    }
    const { event } = recorded;
    const after: JobRecord = before
      ? { jobId: before.jobId, queue: before.queue, state, seq: recorded.seq, submitSeq: before.submitSeq, submitId: before.submitId, commandHash: before.commandHash, later: [...before.later, historyEntry(recorded.seq, event)] }
      : { jobId: recorded.jobId, queue: recorded.queue, state, seq: recorded.seq, submitSeq: recorded.seq, submitId: isEventIdOf(event.id, recorded.jobId) ? null : event.id, commandHash: event.meta.command_hash ?? null, later: NO_EVENTS };
    this.jobs.set(after.jobId, after);
    if (!before) this.indexSubmit(after);
    for (const listener of this.listeners) listener({ before, after, recorded });
    return 'applied';
  }

  private indexSubmit(record: JobRecord): void {
    if (record.state.job.context.key !== null) this.bySubmitEvent.set(submitIdOf(record), record.jobId);
  }

  /** Puts a record back as a checkpoint stored it; listeners see it as new. */
  restore(record: JobRecord): void {
    const before = this.jobs.get(record.jobId);
    this.jobs.set(record.jobId, record);
    this.indexSubmit(record);
    for (const listener of this.listeners) listener({ before, after: record, recorded: undefined });
  }
}
