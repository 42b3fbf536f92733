/**
 * The events on a job's subject (`docket.evt.job.<queue>.<job_id>`). They are folded by both
 * the Job machine and the JobRun machine: "job running" and "run exists" are one append.
 */
import type { Envelope, Json, JsonObject } from './envelope.js';
import type { FanOutSpec } from './jobnode.machine.js';

/** Why a run failed. `cancelled` is the run of a job cancelled while running. */
export const FailureReasons = {
  Error: 'error',
  LeaseExpired: 'lease_expired',
  CrashRecovery: 'crash_recovery',
  Cancelled: 'cancelled',
} as const;
export type FailureReason = (typeof FailureReasons)[keyof typeof FailureReasons];

/** Priority is 0..255, lower is more urgent (DataJoint, BullMQ, nice). */
export const Priority = { Min: 0, Max: 255, Default: 5 } as const;

/** Retry backoff: `base_ms * 2^(attempt-1)`, capped at `max_ms`, with up to `jitter` (0..1) taken off. */
export interface BackoffPolicy {
  readonly base_ms: number;
  readonly max_ms: number;
  readonly jitter: number;
}

/** A job's readable key: DataJoint's upstream primary key, or a plain string. */
export type JobKey = string | JsonObject;

export interface JobError {
  readonly message: string;
  readonly stack?: string;
  /** false ends the retry chain (a NonRetryableJobError in the SDK). */
  readonly retryable?: boolean;
}

export interface JobSubmittedData {
  readonly job_id: string;
  readonly key: JobKey | null;
  readonly params: JsonObject;
  readonly priority: number;
  /**
   * Second part of the order key. null (the default) means "this event's stream sequence", so
   * equal priorities run FIFO and every unmoved job has a distinct position a move can go between.
   */
  readonly position: number | null;
  /** ISO time from which the job may be claimed. */
  readonly run_at: string;
  readonly max_attempts: number;
  readonly backoff: BackoffPolicy;
  /** 1 for a new job; the failed job's attempt + 1 for a retry. */
  readonly attempt: number;
  readonly retry_of: string | null;
  /** true: the job waits (on a dependency or group order) until `job.released`. */
  readonly waiting: boolean;
  /**
   * Flow control's key (a tenant, say): the queue's key_concurrency and key_rate hold per key.
   * Absent in events written before it existed: read as null.
   */
  readonly concurrency_key?: string | null;
  /**
   * Jobs (any queue) this one waits for: it is submitted `waiting` and released when all of them
   * succeeded (a retry chain's last attempt decides), skipped when one of them ends otherwise.
   */
  readonly depends_on?: readonly string[];
  /** The template (and its revision) the job was made from; absent for a job made from none. */
  readonly template?: { readonly name: string; readonly revision: number };
  /** The schedule fire that made the job (its `schedule.fired` names the same tick and job id); absent otherwise. */
  readonly schedule?: { readonly name: string; readonly tick: string; readonly trigger: 'cron' | 'manual' | 'backfill' };
  /**
   * A fan-out job (seed 004): the nodes it runs on and its quorum. Its own run (worker
   * FAN_OUT_WORKER) is claimed in the same commit, with one `jobnode.created` per node; it ends
   * by the quorum rule (machines/jobnode.machine.ts fanOutVerdict). Absent: an ordinary job.
   */
  readonly fan_out?: FanOutSpec;
}

/**
 * What an absent field of a stored `job.submitted` means (commit format 3). The log stores a
 * submit without the fields that hold these values, and every read of the log puts them back
 * (src/nats/codec.ts), so a typical submit is ~290 bytes instead of ~470 and the machines,
 * projections and SDK see the whole shape. These are facts of the log format, not the command
 * defaults (src/commands/limits.ts JobDefaults): changing one would change what every stored
 * log means, so they never change. A `run_at` that is absent is the event's own `time`.
 */
export const SubmittedAbsent = Object.freeze({
  key: null,
  position: null,
  max_attempts: 1,
  // One object for every submit read without one: frozen, so no reader can change another's.
  backoff: Object.freeze({ base_ms: 1_000, max_ms: 3_600_000, jitter: 0.2 }) as BackoffPolicy,
  attempt: 1,
  retry_of: null,
  waiting: false,
} as const);

/** A `job.submitted`'s data as stored: the fields that hold their `SubmittedAbsent` value left out. */
export type StoredSubmittedData = Omit<JobSubmittedData, keyof typeof SubmittedAbsent | 'run_at'> & Partial<Pick<JobSubmittedData, keyof typeof SubmittedAbsent | 'run_at'>>;

export interface JobClaimedData {
  readonly run_id: string;
  readonly worker: string;
  readonly host: string;
  readonly pid: number;
  readonly version: string;
  readonly lease_ms: number;
  /** The worker's user (seed 000's `user`); absent in claims of workers that did not say. */
  readonly user?: string;
  /** The worker's NATS client id on its server (seed 000's `connection_id`); absent when it did not say. */
  readonly connection_id?: number;
}

export interface JobSucceededData {
  readonly run_id: string;
  readonly result: Json;
  readonly exit_code?: number;
  /** How long the handler ran, as the worker measured it (seed 000's `duration`). */
  readonly duration_ms?: number;
}

export interface JobFailedData {
  readonly run_id: string;
  readonly reason: FailureReason;
  readonly error: JobError | null;
  readonly exit_code?: number;
  /** How long the handler ran, as the worker measured it (seed 000's `duration`). */
  readonly duration_ms?: number;
}

export interface JobCancelledData {
  readonly reason: string | null;
}

export interface JobIgnoredData {
  readonly reason: string | null;
}

export interface JobSkippedData {
  /** Set when the handler of a running job found nothing to do. */
  readonly run_id: string | null;
  readonly reason: string | null;
}

/**
 * Why a job left the views. `cleaned`: `docket.cmd.clean` dropped an ended job. The others are
 * job sets' (issue 14): `stale` (superseded by a newer definition), `orphan` (its upstream row is
 * gone), `deleted` (by hand), `completed` (its set is complete and need not keep it).
 */
export const RemovalReasons = ['cleaned', 'stale', 'orphan', 'deleted', 'completed'] as const;
export type RemovalReason = (typeof RemovalReasons)[number];

export interface JobRemovedData {
  readonly reason: RemovalReason;
}

export interface JobMovedData {
  readonly priority: number;
  /** null keeps the position of job.submitted as the position. */
  readonly position: number | null;
  /** A promote: the job may be claimed from this time (a delayed job made due now). */
  readonly run_at?: string;
}

export interface Artifact {
  readonly name: string;
  readonly uri?: string;
  readonly meta?: JsonObject;
}

export interface JobArtifactAddedData {
  readonly run_id: string;
  readonly artifact: Artifact;
}

export type JobSubmittedEvent = Envelope<'job.submitted', JobSubmittedData>;
export type JobReleasedEvent = Envelope<'job.released', Record<string, never>>;
export type JobMovedEvent = Envelope<'job.moved', JobMovedData>;
export type JobClaimedEvent = Envelope<'job.claimed', JobClaimedData>;
export type JobSucceededEvent = Envelope<'job.succeeded', JobSucceededData>;
export type JobFailedEvent = Envelope<'job.failed', JobFailedData>;
export type JobCancelledEvent = Envelope<'job.cancelled', JobCancelledData>;
export type JobIgnoredEvent = Envelope<'job.ignored', JobIgnoredData>;
export type JobSkippedEvent = Envelope<'job.skipped', JobSkippedData>;
export type JobArtifactAddedEvent = Envelope<'job.artifact_added', JobArtifactAddedData>;
export type JobRemovedEvent = Envelope<'job.removed', JobRemovedData>;

export type JobEvent =
  | JobSubmittedEvent
  | JobReleasedEvent
  | JobMovedEvent
  | JobClaimedEvent
  | JobSucceededEvent
  | JobFailedEvent
  | JobCancelledEvent
  | JobIgnoredEvent
  | JobSkippedEvent
  | JobArtifactAddedEvent
  | JobRemovedEvent;

export type JobEventType = JobEvent['type'];

export const JOB_EVENT_TYPES = [
  'job.submitted',
  'job.released',
  'job.moved',
  'job.claimed',
  'job.succeeded',
  'job.failed',
  'job.cancelled',
  'job.ignored',
  'job.skipped',
  'job.artifact_added',
  'job.removed',
] as const satisfies readonly JobEventType[];
