/**
 * The audit's vocabulary: the rules a log must obey and the violations reported against them.
 * Pure types and constants; the readers in src/store produce the messages these describe.
 */

/** One stored message of DOCKET as the audit and the replays read it (src/store/read-log.ts). */
export interface RecordedMessage {
  /** Stream sequence: the event's position in the log. */
  readonly seq: number;
  readonly subject: string;
  /** When the server stored it, ms since the epoch. */
  readonly time: number;
  /** The stored `Nats-Msg-Id` header; null when the append carried none. */
  readonly msgId: string | null;
  /** The stored `Nats-Expected-Last-Subject-Sequence` header; null when the append was unguarded. */
  readonly expectedLastSubjectSeq: number | null;
  readonly data: Uint8Array;
}

/**
 * The rules. Each violation names exactly one; a refused event is reported under the most
 * specific rule that explains the refusal (a completion by another run is `stale_run`, not
 * `illegal_transition`), and an event can break several rules at once (an unguarded, illegal
 * append is reported twice).
 */
export const AuditRules = {
  /** Not a docket envelope: not JSON, no id/type/time/data, an unknown job event type, or data of the wrong shape. */
  Undecodable: 'undecodable',
  /** The envelope disagrees with where it is stored: queue or job id vs the subject, event id vs `Nats-Msg-Id`. */
  EnvelopeMismatch: 'envelope_mismatch',
  /** The machines refuse the event in the state its aggregate had reached. */
  IllegalTransition: 'illegal_transition',
  /** The append carried no `Nats-Expected-Last-Subject-Sequence` (or no `Nats-Msg-Id`): nothing guarded it. */
  UnguardedAppend: 'unguarded_append',
  /** The event expected a previous event on its subject that the stream does not hold there. */
  SequenceGap: 'sequence_gap',
  /** The event expected an earlier previous event than the one the subject holds: it was appended out of order. */
  SequenceReorder: 'sequence_reorder',
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
} as const;
export type AuditRule = (typeof AuditRules)[keyof typeof AuditRules];

export const AUDIT_RULES: readonly AuditRule[] = Object.values(AuditRules);

export interface Violation {
  /** Stream sequence of the offending event. */
  readonly seq: number;
  readonly subject: string;
  /** `job:<job_id>` for job subjects, `<kind>:<id>` for the others, the subject when unknown. */
  readonly aggregate: string;
  readonly rule: AuditRule;
  readonly message: string;
  /** Stream sequences of the events involved, the offending one last. */
  readonly events: readonly number[];
}

export interface AuditOptions {
  /** Report only violations at or after this sequence (the fold still starts at the beginning). */
  readonly fromSeq?: number;
  /** Report only violations at or before this sequence. */
  readonly toSeq?: number;
  /**
   * Keep at most this many violations in the report; the counts per rule stay exact.
   * @defaultValue 10_000
   */
  readonly maxViolations?: number;
}

export interface AuditReport {
  readonly ok: boolean;
  /** Messages read. */
  readonly messages: number;
  /** Job events folded through the machines (accepted or refused). */
  readonly jobEvents: number;
  /** Events on subjects whose machines the audit does not know yet (schedules, reservations, groups): only their sequence is checked. */
  readonly otherEvents: number;
  readonly jobs: number;
  readonly firstSeq: number | null;
  readonly lastSeq: number | null;
  readonly violationCount: number;
  readonly byRule: Readonly<Record<AuditRule, number>>;
  /** The first `maxViolations` violations, in stream order. */
  readonly violations: readonly Violation[];
  readonly truncated: boolean;
}
