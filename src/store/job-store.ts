/**
 * Every job's current state, folded from the log with the fast fold derived from the machines.
 * It is the leader's state to decide against and the source every projection is derived from.
 * It holds committed events only: a partition's writer applies a commit's events once the
 * stream acknowledged it. Events may arrive twice on the node that appended them (from its own
 * ack and from the tail); the event's position makes the second a no-op.
 */
import { evolveJob, INITIAL_JOB_STATE, JOB_EVENT_TYPES, type Envelope, type JobEvent, type JobState, type Position } from '../../machines/index.js';
import { eventIdOf, isEventIdOf } from '../ids.js';
import type { ColdJobs } from './cold-jobs.js';
import { EvictedIndex, fingerprintOf, submitEventFingerprintOf, type EvictedEntry, type EvictedJob, type Fingerprint } from './evicted-index.js';

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

/** A job's body left memory: what the views that hold job ids drop. */
export interface Eviction {
  readonly record: JobRecord;
  readonly entry: EvictedJob;
  /** The entry as a checkpoint writes it. */
  readonly line: EvictedLine;
}
export type EvictionListener = (eviction: Eviction) => void;

/** An evicted job as a checkpoint stores it: its fingerprints (id first) and its entry. */
export interface EvictedLine extends EvictedEntry {
  readonly fingerprints: readonly Fingerprint[];
}

export class JobStore {
  private readonly jobs = new Map<string, JobRecord>();
  /**
   * job.submitted event id -> job id, for keyed jobs: a resent keyed submit finds what it created
   * even when the key has moved to another generation (another id). An unkeyed job's id is a
   * function of its command, so the job itself says whether a resend created it (submitId).
   */
  private readonly bySubmitEvent = new Map<string, string>();
  private readonly listeners: JobChangeListener[] = [];
  /** Finished jobs whose bodies left memory (see `evict`): every id ever created stays known. */
  private readonly evictedIndex = new EvictedIndex();
  private readonly evictionListeners: EvictionListener[] = [];
  private readonly reinstateListeners: ((record: JobRecord) => void)[] = [];
  /** Queued jobs restored from a checkpoint and not yet read (cold-jobs.ts): objects on first read. */
  private coldJobs: ColdJobs | undefined;
  /** Events the machines refused while folding the log (a tampered log; `docket audit` names them). */
  refused = 0;

  get size(): number {
    return this.jobs.size + (this.coldJobs?.size ?? 0);
  }

  /** The job's body; undefined when no job has this id or its body was evicted (see `evicted`). */
  get(jobId: string): JobRecord | undefined {
    return this.jobs.get(jobId) ?? this.warm(jobId);
  }

  /** Whether a job with this id exists (its body in memory or evicted): what keeps derived ids unique. */
  has(jobId: string): boolean {
    return this.jobs.has(jobId) || this.coldRowOf(jobId) >= 0 || this.evicted(jobId) !== undefined;
  }

  /** Holds the cold jobs of a checkpoint (its rows superseded by newer records already left out). */
  restoreCold(cold: ColdJobs): void {
    this.coldJobs = cold;
  }

  /** The cold rows (for the checkpoint writer, which copies them as they are). */
  get cold(): ColdJobs | undefined {
    return this.coldJobs;
  }

  /** The row of a job still cold, or -1. */
  private coldRowOf(jobId: string): number {
    const cold = this.coldJobs;
    if (cold === undefined || cold.size === 0) return -1;
    const row = cold.rowOf(fingerprintOf(jobId));
    return row >= 0 && cold.isCold(row) ? row : -1;
  }

  /**
   * Makes a cold job an object, heard by no listener: no projection lost it (they know it from
   * the columns), and the checkpoint holds it already.
   */
  private warm(jobId: string): JobRecord | undefined {
    const row = this.coldRowOf(jobId);
    if (row < 0) return undefined;
    const record = this.coldJobs!.materialise(row);
    this.jobs.set(record.jobId, record);
    return record;
  }

  /** The job's status, its body in memory or evicted. */
  statusOf(jobId: string): JobRecord['state']['job']['value'] | undefined {
    if (this.coldRowOf(jobId) >= 0) return 'queued';
    const record = this.jobs.get(jobId);
    if (record) return record.state.job.value;
    const row = this.evictedIndex.rowOf(fingerprintOf(jobId));
    return row < 0 ? undefined : this.evictedIndex.statusAt(row);
  }

  /** The job's queue, its body in memory or evicted. */
  queueOf(jobId: string): string | undefined {
    const row = this.coldRowOf(jobId);
    if (row >= 0) return this.coldJobs!.queueAt(row);
    return this.jobs.get(jobId)?.queue ?? this.evicted(jobId)?.queue;
  }

  /** The compact entry of a job whose body was evicted (undefined while its body is in memory, or when no such job exists). */
  evicted(jobId: string): EvictedJob | undefined {
    if (this.evictedIndex.size === 0 || this.jobs.has(jobId)) return undefined;
    const row = this.evictedIndex.rowOf(fingerprintOf(jobId));
    return row < 0 ? undefined : this.evictedIndex.entryAt(row);
  }

  /** The evicted job whose job.submitted event has this id (a resent keyed submit finds it). */
  evictedBySubmitEventId(eventId: string): EvictedJob | undefined {
    if (this.evictedIndex.size === 0) return undefined;
    const row = this.evictedIndex.rowOf(submitEventFingerprintOf(eventId));
    return row < 0 ? undefined : this.evictedIndex.entryAt(row);
  }

  /** Evicted jobs held in the compact index. */
  get evictedCount(): number {
    return this.evictedIndex.size;
  }

  /**
   * Drops a finished job's body from memory, keeping its compact entry: its id stays taken
   * (derived ids stay unique) and its body can be read back from the log by its positions.
   * Local to this node's memory: nothing is appended. `outcome`: what its retry chain came to.
   */
  evict(jobId: string, outcome: JobRecord['state']['job']['value']): EvictedJob | undefined {
    const record = this.jobs.get(jobId);
    if (!record) return undefined;
    const fingerprints = [fingerprintOf(jobId)];
    if (this.bySubmitEvent.has(submitIdOf(record))) fingerprints.push(submitEventFingerprintOf(submitIdOf(record)));
    const line: EvictedLine = { fingerprints, queue: record.queue, status: record.state.job.value, outcome, positions: historyOf(record).map((h) => h.seq) };
    // A job read back and evicted again keeps its row (add finds it by its id's fingerprint).
    const entry = this.evictedIndex.entryAt(this.evictedIndex.add(fingerprints, line));
    this.jobs.delete(jobId);
    this.bySubmitEvent.delete(submitIdOf(record));
    for (const listener of this.evictionListeners) listener({ record, entry, line });
    return entry;
  }

  onEvict(listener: EvictionListener): void {
    this.evictionListeners.push(listener);
  }

  /**
   * Puts back an evicted job's body read from the log (for a command on it). No change listener
   * hears it, since no projection lost it; reinstate listeners (the evictor) do.
   */
  reinstate(record: JobRecord): void {
    if (this.jobs.has(record.jobId)) return;
    this.jobs.set(record.jobId, record);
    this.indexSubmit(record);
    for (const listener of this.reinstateListeners) listener(record);
  }

  onReinstate(listener: (record: JobRecord) => void): void {
    this.reinstateListeners.push(listener);
  }

  /** Puts back an evicted job as a checkpoint stored it. */
  restoreEvicted(line: EvictedLine): void {
    this.evictedIndex.add(line.fingerprints, line);
  }

  /** Every evicted job with its fingerprints (id first, then aliases): for the checkpoint. */
  evictedLines(): Iterable<EvictedLine> {
    return this.evictedIndex.rowsWithKeys();
  }

  /** The job created by the job.submitted event with this id, if any. */
  bySubmitEventId(eventId: string): JobRecord | undefined {
    const jobId = this.bySubmitEvent.get(eventId);
    return jobId === undefined ? undefined : this.jobs.get(jobId);
  }

  /** Every job whose body is in memory: cold jobs are made objects first (a scan of all jobs is O(jobs) anyway). */
  values(): IterableIterator<JobRecord> {
    const cold = this.coldJobs;
    if (cold !== undefined && cold.size > 0) {
      for (const row of cold.coldRows()) {
        const record = cold.materialise(row);
        this.jobs.set(record.jobId, record);
      }
    }
    return this.jobs.values();
  }

  /**
   * The jobs held as objects, without the cold ones: for a scan that looks only for jobs that
   * are not queued (running, failed, waiting on dependencies), since every cold job is queued.
   */
  warmValues(): IterableIterator<JobRecord> {
    return this.jobs.values();
  }

  /** Jobs held as objects (the rest of `size` is cold). */
  get warmSize(): number {
    return this.jobs.size;
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
    // A job.submitted never finds a cold job (its id is checked before it is decided; the tail starts after the checkpoint).
    const before = recorded.event.type === 'job.submitted' ? this.jobs.get(recorded.jobId) : this.get(recorded.jobId);
    // Only an evicted job gets events with no body here; a job.submitted never does (its id is checked before it is decided), so the hot path computes no fingerprint.
    if (!before && this.evictedIndex.size > 0 && recorded.event.type !== 'job.submitted') {
      const row = this.evictedIndex.rowOf(fingerprintOf(recorded.jobId));
      if (row >= 0) return this.applyToEvicted(row, recorded);
    }
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
    // One change for every listener (its fields are readonly): ~14 listeners, 3 events a job.
    const change: JobChange = { before, after, recorded };
    for (const listener of this.listeners) listener(change);
    return 'applied';
  }

  /**
   * An event on a job whose body was evicted here (decided by a node that kept it longer, or
   * folded again): its position joins the entry; a removal moves its status. Other events on a
   * finished job change nothing the entry holds.
   */
  private applyToEvicted(row: number, recorded: RecordedJobEvent): ApplyResult {
    const entry = this.evictedIndex.entryAt(row);
    if (recorded.seq <= entry.positions[entry.positions.length - 1]!) return 'already_applied';
    this.evictedIndex.update(row, recorded.seq, recorded.event.type === 'job.removed' ? 'removed' : entry.status);
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
    const change: JobChange = { before, after: record, recorded: undefined };
    for (const listener of this.listeners) listener(change);
  }
}
