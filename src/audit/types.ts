/**
 * The audit's vocabulary: the rules a log must obey and the violations reported against them.
 * Pure types and constants; the readers in src/store produce the messages these describe.
 *
 * Log v2: one stored message of DOCKET is one commit (an ordered list of events of one
 * partition). Rules about the chain of commits are checked per commit; rules about aggregates
 * per event, and every violation names where it is: the commit's stream sequence and, for an
 * event, its index in the commit.
 */

/** One stored message of DOCKET (one commit) as the audit and the replays read it (src/store/read-log.ts). */
export interface RecordedMessage {
  /** Stream sequence of the commit: the first half of each of its events' positions. */
  readonly seq: number;
  /** `docket.log.<partition>`. */
  readonly subject: string;
  /** When the server stored it, ms since the epoch. */
  readonly time: number;
  /** The stored `Nats-Msg-Id` header (the commit id); null when the append carried none. */
  readonly msgId: string | null;
  /** The stored `Nats-Expected-Last-Subject-Sequence` header; null when the append was unguarded. */
  readonly expectedLastSubjectSeq: number | null;
  /** The commit payload as stored: the bytes the next commit's `prev_hash` is the SHA-256 of. */
  readonly data: Uint8Array;
  /** commitHash(data), when the reader computed it already (packed.ts); absent: the audit does. */
  readonly hash?: string;
}

/** Where an event is: its commit's stream sequence and its index in the commit (null: the commit itself). */
export interface EventRef {
  readonly seq: number;
  readonly index: number | null;
}

/**
 * The rules. Each violation names exactly one; a refused event is reported under the most
 * specific rule that explains the refusal (a completion by another run is `stale_run`, not
 * `illegal_transition`), and a commit or event can break several rules at once (a commit
 * stored after a deleted one breaks both the sequence and the hash chain).
 */
export const AuditRules = {
  /** Not a docket commit (not JSON, not v2, no id, partition, writer, prev_hash or events), or an event that is not an envelope: no id/type/time/aggregate/data/meta, an unknown job event type, or data of the wrong shape. */
  Undecodable: 'undecodable',
  /** The commit or event disagrees with where it is stored: the commit's partition vs its subject, its id vs `Nats-Msg-Id`, an event's queue or kind vs the partition, job.submitted's job_id vs its aggregate. */
  EnvelopeMismatch: 'envelope_mismatch',
  /** The machines refuse the event in the state its aggregate had reached. */
  IllegalTransition: 'illegal_transition',
  /** The commit carried no `Nats-Expected-Last-Subject-Sequence` (or no `Nats-Msg-Id`): nothing guarded its place in the partition. */
  UnguardedAppend: 'unguarded_append',
  /** The commit expected a previous commit of its partition that the stream does not hold there: a commit is missing. */
  SequenceGap: 'sequence_gap',
  /** The commit expected an earlier previous commit than the one the partition holds: a commit came between (appended out of order, or inserted). */
  SequenceReorder: 'sequence_reorder',
  /** The commit's `prev_hash` is not the SHA-256 of the partition's previous commit as stored (null for the first): a commit was edited, inserted or deleted. */
  HashChain: 'hash_chain',
  /** The commit's writer epoch is lower than the partition's previous commit's: a deposed writer's commit. */
  WriterEpoch: 'writer_epoch',
  /** A claim while the job's run was still open. */
  TwoOpenRuns: 'two_open_runs',
  /** A completion (or artifact) naming a run that does not hold the job: fencing. */
  StaleRun: 'stale_run',
  /** A run closed a second time. */
  DoubleClose: 'double_close',
  /** A retry whose `retry_of` or `attempt` does not follow from a failed (or, by hand, cancelled) job of the same queue, or a second retry of one job. */
  RetryChain: 'retry_chain',
  /** A claim decided before the job's `run_at`. */
  ClaimedBeforeRunAt: 'claimed_before_run_at',
  /** A claim while its queue was paused or reserved (the reservation's own direct job excepted). */
  ClaimWhileHeld: 'claim_while_held',
  /** A schedule fire whose job id is not the one derived from (schedule, tick) (`scheduledJobId`), or a second fire of one (schedule, tick). */
  ScheduleRule: 'schedule_rule',
  /** A settled schedule fire whose job the log does not hold: its queue's partition committed well after the fire (src/audit/schedule-audit.ts says when a fire is settled). */
  FireWithoutJob: 'fire_without_job',
  /** A due tick neither fired nor missed: skipped between two handled ticks, miscounted in a capped miss, missed as catchup while the sys leader was up, or left unhandled to the end of the log while it was up. */
  TickCoverage: 'tick_coverage',
  /** A group's recorded end differs from seed 003's derivation from its members' ends then, or a sequential group's member was claimed before the member before it had ended (a member: its retry chain's last attempt). */
  GroupRule: 'group_rule',
  /** A job released (`job.released`) before each job it depends on (the last attempt of its retry chain) had succeeded. */
  ReleasedBeforeDependencies: 'released_before_dependencies',
  /** A claim past the queue's flow-control limits as they stood then: concurrency, rate, or those of the job's concurrency_key. */
  LimitExceeded: 'limit_exceeded',
} as const;
export type AuditRule = (typeof AuditRules)[keyof typeof AuditRules];

export const AUDIT_RULES: readonly AuditRule[] = Object.values(AuditRules);

export interface Violation {
  /** Stream sequence of the offending commit. */
  readonly seq: number;
  /** Index of the offending event in its commit; null when the commit itself breaks the rule. */
  readonly index: number | null;
  /** The commit's subject (`docket.log.<partition>`). */
  readonly subject: string;
  /** `job:<job_id>`, `<kind>:<id>` for other aggregates, `partition:<name>` for a commit's own rules. */
  readonly aggregate: string;
  readonly rule: AuditRule;
  readonly message: string;
  /** The events (or commits, index null) involved, the offending one last. */
  readonly events: readonly EventRef[];
}

export interface AuditOptions {
  /** Report only violations in commits at or after this stream sequence (the fold still starts at the beginning). */
  readonly fromSeq?: number;
  /** Report only violations in commits at or before this stream sequence. */
  readonly toSeq?: number;
  /**
   * Keep at most this many violations in the report; the counts per rule stay exact.
   * @defaultValue 10_000
   */
  readonly maxViolations?: number;
}

export interface AuditReport {
  readonly ok: boolean;
  /** Stored messages (commits) read. */
  readonly messages: number;
  /** Events in them (decodable or not). */
  readonly events: number;
  /** Job events folded through the machines (accepted or refused). */
  readonly jobEvents: number;
  /** Events of aggregates whose machines the audit does not know yet (queues, schedules, reservations, groups): their commits' chain is checked, not their transitions. */
  readonly otherEvents: number;
  readonly jobs: number;
  /** Partitions seen. */
  readonly partitions: number;
  readonly firstSeq: number | null;
  readonly lastSeq: number | null;
  readonly violationCount: number;
  /** Schedule fires whose job is not in the log yet and not yet settled: on their way, not violations. */
  readonly pendingFires: number;
  readonly byRule: Readonly<Record<AuditRule, number>>;
  /** The first `maxViolations` violations, in log order. */
  readonly violations: readonly Violation[];
  readonly truncated: boolean;
}
