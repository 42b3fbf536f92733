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
  /**
   * A failed run's stored error message: its first 2,047 characters (seed 000's
   * `error_message varchar(2047)`, a summary); a longer message is kept whole as the stack when the
   * worker sent none (seed 000: the full text is in error_stack).
   */
  MaxErrorSummaryChars: 2_047,
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
  /** Members of one group (one group.create request). */
  MaxGroupJobs: 1_000,
  /** Nodes one fan-out job may name (each is a jobnode created in the submit's commit). */
  MaxFanOutNodes: 256,
  /** Jobs one job may depend on (depends_on). */
  MaxDependencies: 100,
  /** Jobs one claim may take. */
  MaxClaimJobs: 1_000,
  /** A long-poll claim waits at most this long (NATS request timeouts beyond it are the client's). */
  MaxClaimWaitMs: 60_000,
  MinLeaseMs: 1_000,
  MaxLeaseMs: 24 * 3_600_000,
  /** Flow control (queue.set): a concurrency or a rate's limit above this is a typo, not a limit. */
  MaxConcurrency: 100_000,
  MaxRateLimit: 1_000_000,
  /** A rate's window: at least 100 ms (timers are not finer), at most a day (claim times are kept that long at most). */
  MinRatePeriodMs: 100,
  MaxRatePeriodMs: 24 * 3_600_000,
  /** A reservation's time to live: from a second (issue 15) to the longest lease. */
  MinReservationTtlMs: 1_000,
  MaxReservationTtlMs: 24 * 3_600_000,
  /** Free text on commands: a pause's reason, a holder, an actor, a schedule's or template's note. */
  MaxNoteChars: 1_000,
  /**
   * Job sets (issue 14). A refresh holds its source's and target's keys in memory while it plans
   * (about 150-200 bytes each with their identities): two million keys stay well under a
   * gigabyte on a 24 GiB node; a bigger source is refused, naming the limit.
   */
  MaxSourceKeys: 2_000_000,
  /** `{keys: [...]}` travels in the jobset.put command, which must fit NATS's 1 MiB payload. */
  MaxInlineKeys: 10_000,
  /** A key source's SQL text. */
  MaxSourceSqlBytes: 64 * 1024,
  /** A `{command: [...]}` source's argv: arguments, and bytes per argument. */
  MaxCommandArgs: 256,
  MaxCommandArgBytes: 4 * 1024,
  /** A command's stdout: 2,000,000 keys of ~100 bytes fit; a runaway command is stopped here. */
  MaxCommandOutputBytes: 256 * 1024 * 1024,
  /** How much of a failing command's stderr its error quotes (the end, where the reason usually is). */
  MaxCommandStderrExcerpt: 2 * 1024,
  /** A key source query or command runs at most this long (its own timeout_ms may be shorter). */
  MaxKeySourceTimeoutMs: 3_600_000,
  /** Attributes a job set may declare (a primary key of more is a mistake). */
  MaxKeyAttributes: 64,
  /** OR-terms in a refresh's restrict. */
  MaxRestrictTerms: 1_000,
  /** stale_timeout_s and orphan_timeout_s: ten years, like MaxDelayMs. */
  MaxJobSetTimeoutS: 10 * 366 * 24 * 3_600,
  /** Template and schedule names: one subject token, short enough to read in a table. */
  MaxScheduleNameChars: 128,
  /** A cron expression's length: the longest useful pattern (lists of every minute) fits. */
  MaxCronChars: 256,
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
 * docket's defaults of a job set (seed 000's `dj.config['jobs.*']`), the last step of the
 * precedence command > job set setting > default (src/jobsets/settings.ts).
 */
export const JobSetDefaults = {
  /** DataJoint's default: a succeeded job leaves the job set's views once it succeeds. */
  keepCompleted: false,
  /** Seed 000: one hour; 0 skips stale cleanup. */
  staleTimeoutS: 3_600,
  /** Seed 000: no orphan cleanup unless a refresh asks for it. */
  orphanTimeoutS: null,
  autoRefresh: true,
  defaultPriority: 5,
  /** New jobs are due at once. */
  delayMs: 0,
  /** A key source query or command without its own timeout_ms. */
  keySourceTimeoutMs: 300_000,
  /** Connecting to a key source's database. */
  connectTimeoutMs: 10_000,
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
