/** Declared limits, each with its reason, defined once (documented in README, "Limits"). */
export const Limits = {
  /**
   * DESIGN, "Every event has a bounded size": checked at the command, before anything is
   * decided, so every event fits one message (one commit in log v2) with room to spare.
   * Params are stored in every copy of the job's snapshot; 64 KiB keeps a job one small message.
   */
  MaxParamsBytes: 64 * 1024,
  /** A run's result, as JSON (job.succeeded). */
  MaxResultBytes: 64 * 1024,
  /** A failed run's error message, and its stack, each (job.failed). */
  MaxErrorMessageBytes: 16 * 1024,
  MaxErrorStackBytes: 16 * 1024,
  /** An artifact's metadata, as JSON (job.artifact_added). */
  MaxArtifactMetaBytes: 16 * 1024,
  /**
   * One run's progress in a heartbeat, as JSON. Not stored, only logged (at debug): a bound keeps
   * a chatty handler from filling the leader's log.
   */
  MaxProgressBytes: 4 * 1024,
  /** One batch is one request; 10,000 jobs of small params fit NATS's default 1 MiB payload. */
  MaxBatchJobs: 10_000,
  /** Submit items of one queue decided concurrently (their events join the partition's commits). */
  MaxAppendsInFlight: 1_024,
  /** `list` page size. */
  MaxListLimit: 1_000,
  DefaultListLimit: 100,
  MaxAttempts: 1_000,
  /** A key is an index entry held in memory per live job; 1 KiB of JSON is plenty for a primary key. */
  MaxKeyBytes: 1_024,
  /** Deeper JSON in params or keys is refused before any recursive code sees it. */
  MaxJsonDepth: 64,
  /** Ten years: beyond it a delay is a mistake, and far beyond it no time can represent it. */
  MaxDelayMs: 10 * 366 * 24 * 3_600_000,
  /** Jobs one claim may take. */
  MaxClaimJobs: 1_000,
  /** A long-poll claim waits at most this long (NATS request timeouts beyond it are the client's). */
  MaxClaimWaitMs: 60_000,
  MinLeaseMs: 1_000,
  MaxLeaseMs: 24 * 3_600_000,
  /** Template and schedule names: one subject token, short enough to read in a table. */
  MaxScheduleNameChars: 128,
  /** A cron expression's length: the longest useful pattern (lists of every minute) fits. */
  MaxCronChars: 256,
  /** A note or description on a schedule or template. */
  MaxNoteChars: 1_000,
  /** A tick fires up to this much after its time (jitter): beyond an hour it is another schedule. */
  MaxScheduleJitterMs: 3_600_000,
  /** Missed ticks older than a catch-up window are never caught up; a year covers any outage worth catching up. */
  MaxCatchupWindowMs: 366 * 24 * 3_600_000,
  /**
   * One backfill spans at most a year and fires at most 10,000 ticks (both checked: the tick
   * count needs the schedule's cron): a backfill is one request appending one fire and one job
   * per tick, bounded like a submit batch (MaxBatchJobs).
   */
  MaxBackfillRangeMs: 366 * 24 * 3_600_000,
  MaxBackfillTicks: 10_000,
  /** `schedule.preview` lists at most this many fire times. */
  MaxPreviewCount: 1_000,
  DefaultPreviewCount: 5,
} as const;

/**
 * Defaults of a schedule put (documented in README, "Schedules and templates"): written into the
 * schedule.put event, so the log says what was in force.
 */
export const ScheduleDefaults = {
  timezone: 'UTC',
  jitterMs: 0,
  /** After downtime, one fire for the newest missed tick (what a person usually wants from "nightly"). */
  catchup: 'latest',
  /** A tick while the previous fire's job is still live is missed: no pile-up of runs. */
  overlap: 'skip',
} as const;

/** Defaults of a submitted job (documented in README). */
export const JobDefaults = {
  maxAttempts: 1,
  /** A claim's lease when the worker names none; heartbeats extend it. */
  leaseMs: 30_000,
  backoff: { base_ms: 1_000, max_ms: 3_600_000, jitter: 0.2 },
} as const;
