/**
 * The audit: folds recorded messages, in stream order, through the same machines that decided
 * them (with `evolveJob`, the fast fold derived from the machines and proven equal to them) and
 * checks every aggregate against the rules in ./types.ts. Pure: messages in, violations out;
 * reading the stream is src/store/read-log.ts's job.
 *
 * A refused event is skipped (the aggregate keeps the state it had, as every node's fold does),
 * so one tampered event gives one violation, not a cascade through the rest of its history.
 */
import { evolveJob, INITIAL_JOB_STATE, type JobEvent, type JobState } from '../../machines/index.js';
import { decodeMessage, type DecodedMessage } from './decode.js';
import { AUDIT_RULES, AuditRules, type AuditOptions, type AuditReport, type AuditRule, type RecordedMessage, type Violation } from './types.js';
import { EXPECTED_HEADER, MSG_ID_HEADER } from '../nats/subjects.js';

/** What the audit keeps per subject: the sequence chain, and for a job its fold and the seqs the rules cite. */
interface SubjectState {
  /** Stream sequence of the subject's last stored event (accepted or not): what the next append must expect. */
  lastSeq: number;
  job: JobAudit | null;
}

interface JobAudit {
  readonly queue: string;
  readonly jobId: string;
  state: JobState;
  /** Sequence of the accepted job.submitted; 0 before it. */
  submitSeq: number;
  /** Sequence of the accepted job.claimed that opened the run. */
  claimSeq: number;
  /** Sequence of the event that closed the run. */
  closeSeq: number;
  /** Sequence of the event that ended the job (terminal state). */
  endSeq: number;
  /** The retry created for this job's failure, and its submit sequence. */
  retriedBy: string | null;
  retrySeq: number;
}

const CLOSING = new Set(['job.succeeded', 'job.failed', 'job.skipped', 'job.cancelled']);
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'skipped', 'ignored']);

function emptyCounts(): Record<AuditRule, number> {
  const counts = {} as Record<AuditRule, number>;
  for (const rule of AUDIT_RULES) counts[rule] = 0;
  return counts;
}

function runIdOf(event: JobEvent): string | null {
  const d = event.data as { run_id?: unknown };
  return typeof d.run_id === 'string' ? d.run_id : null;
}

/**
 * Incremental auditor: `push` messages in stream order (duplicates and older sequences are
 * ignored), then `report()`. Keeps one small record per subject.
 */
export class Auditor {
  private readonly subjects = new Map<string, SubjectState>();
  private readonly violations: Violation[] = [];
  private readonly counts = emptyCounts();
  private readonly fromSeq: number;
  private readonly toSeq: number;
  private readonly maxViolations: number;
  private messages = 0;
  private jobEvents = 0;
  private otherEvents = 0;
  private jobs = 0;
  private firstSeq: number | null = null;
  private lastSeq = 0;
  private violationCount = 0;

  constructor(options: AuditOptions = {}) {
    this.fromSeq = options.fromSeq ?? 1;
    this.toSeq = options.toSeq ?? Number.MAX_SAFE_INTEGER;
    this.maxViolations = options.maxViolations ?? 10_000;
  }

  private violate(seq: number, subject: string, aggregate: string, rule: AuditRule, message: string, events: readonly number[]): void {
    if (seq < this.fromSeq || seq > this.toSeq) return;
    this.violationCount += 1;
    this.counts[rule] += 1;
    if (this.violations.length < this.maxViolations) this.violations.push({ seq, subject, aggregate, rule, message, events });
  }

  pushAll(messages: Iterable<RecordedMessage>): void {
    for (const m of messages) this.push(m);
  }

  push(message: RecordedMessage): void {
    const { seq, subject } = message;
    if (seq <= this.lastSeq) return;
    this.lastSeq = seq;
    if (this.firstSeq === null) this.firstSeq = seq;
    this.messages += 1;

    let st = this.subjects.get(subject);
    if (st === undefined) {
      st = { lastSeq: 0, job: null };
      this.subjects.set(subject, st);
    }
    const previousSeq = st.lastSeq;
    st.lastSeq = seq;

    const decoded = decodeMessage(message);
    const expected = message.expectedLastSubjectSeq;
    if (expected === previousSeq && message.msgId !== null && decoded.kind === 'job') {
      // The common case: a guarded job event, so no header rule to check.
      this.pushJob(seq, subject, `job:${decoded.jobId}`, st, decoded, message.msgId);
      return;
    }
    const aggregate = decoded.kind === 'job' ? `job:${decoded.jobId}` : decoded.kind === 'other' ? `${decoded.aggregateKind}:${decoded.aggregateId}` : decoded.aggregate;

    // Sequence: every docket append expects its subject's previous stream sequence (0 creates).
    if (expected === null || message.msgId === null) {
      const missing = [expected === null ? EXPECTED_HEADER : '', message.msgId === null ? MSG_ID_HEADER : '']
        .filter((h) => h !== '')
        .join(' and ');
      this.violate(seq, subject, aggregate, AuditRules.UnguardedAppend, `appended without ${missing}: nothing guarded its place in ${aggregate}`, previousSeq > 0 ? [previousSeq, seq] : [seq]);
    }
    if (expected !== null && expected !== previousSeq) {
      if (expected > previousSeq) {
        this.violate(
          seq,
          subject,
          aggregate,
          AuditRules.SequenceGap,
          `expected the previous event of ${aggregate} at seq ${expected}, but the subject holds ${previousSeq === 0 ? 'nothing before it' : `seq ${previousSeq} there`}: an event is missing`,
          previousSeq > 0 ? [previousSeq, seq] : [seq],
        );
      } else {
        this.violate(
          seq,
          subject,
          aggregate,
          AuditRules.SequenceReorder,
          `expected the previous event of ${aggregate} at seq ${expected}, but seq ${previousSeq} came between: appended out of order`,
          expected > 0 ? [expected, previousSeq, seq] : [previousSeq, seq],
        );
      }
    }

    if (decoded.kind === 'undecodable') {
      this.violate(seq, subject, aggregate, AuditRules.Undecodable, decoded.reason, [seq]);
      return;
    }
    if (decoded.kind === 'other') {
      this.otherEvents += 1;
      if (message.msgId !== null && message.msgId !== decoded.event.id) {
        this.violate(seq, subject, aggregate, AuditRules.EnvelopeMismatch, `event id ${decoded.event.id} differs from its Nats-Msg-Id ${message.msgId}`, [seq]);
      }
      return;
    }

    this.pushJob(seq, subject, aggregate, st, decoded, message.msgId);
  }

  /** Envelope checks, the fold through the machines, and the rules a job event can break. */
  private pushJob(seq: number, subject: string, aggregate: string, st: SubjectState, decoded: Extract<DecodedMessage, { kind: 'job' }>, msgId: string | null): void {
    this.jobEvents += 1;
    const { event, queue, jobId } = decoded;
    let job = st.job;
    if (job === null) {
      job = { queue, jobId, state: INITIAL_JOB_STATE, submitSeq: 0, claimSeq: 0, closeSeq: 0, endSeq: 0, retriedBy: null, retrySeq: 0 };
      st.job = job;
    }
    if (event.queue !== queue) {
      this.violate(seq, subject, aggregate, AuditRules.EnvelopeMismatch, `${event.type} says queue ${String(event.queue)} but is stored under queue ${queue}`, [seq]);
    }
    if (event.type === 'job.submitted' && event.data.job_id !== jobId) {
      this.violate(seq, subject, aggregate, AuditRules.EnvelopeMismatch, `job.submitted says job ${event.data.job_id} but is stored under job ${jobId}`, [seq]);
    }
    if (msgId !== null && msgId !== event.id) {
      this.violate(seq, subject, aggregate, AuditRules.EnvelopeMismatch, `event id ${event.id} differs from its Nats-Msg-Id ${msgId}`, [seq]);
    }

    const before = job.state;
    const after = evolveJob(before, event);
    if (after === null) {
      this.refused(seq, subject, aggregate, job, event);
      return;
    }

    switch (event.type) {
      case 'job.submitted':
        job.submitSeq = seq;
        this.jobs += 1;
        this.checkRetry(seq, subject, aggregate, job, event);
        break;
      case 'job.claimed':
        job.claimSeq = seq;
        break;
      default:
        if (CLOSING.has(event.type) && before.run.value === 'running' && after.run.value !== 'running') job.closeSeq = seq;
    }
    if (!TERMINAL.has(before.job.value) && TERMINAL.has(after.job.value)) job.endSeq = seq;
    job.state = after;
  }

  /** Names the most specific rule the machines' refusal of `event` breaks. */
  private refused(seq: number, subject: string, aggregate: string, job: JobAudit, event: JobEvent): void {
    const { job: j, run } = job.state;
    const named = `${event.type} (event ${event.id})`;
    if (j.value === 'new') {
      this.violate(seq, subject, aggregate, AuditRules.IllegalTransition, `${named} for a job that was never submitted`, [seq]);
      return;
    }
    if (event.type === 'job.submitted') {
      this.violate(seq, subject, aggregate, AuditRules.IllegalTransition, `${named} for a job already submitted at seq ${job.submitSeq}`, [job.submitSeq, seq]);
      return;
    }
    if (event.type === 'job.claimed') {
      if (run.value === 'running') {
        this.violate(
          seq,
          subject,
          aggregate,
          AuditRules.TwoOpenRuns,
          `${named} opens run ${event.data.run_id} while run ${String(run.context.run_id)} (claimed at seq ${job.claimSeq}) is still open`,
          [job.claimSeq, seq],
        );
        return;
      }
      if (j.value === 'queued' && Date.parse(event.time) < Date.parse(j.context.run_at)) {
        this.violate(
          seq,
          subject,
          aggregate,
          AuditRules.ClaimedBeforeRunAt,
          `${named} at ${event.time}, before the job's run_at ${j.context.run_at}`,
          [job.submitSeq, seq],
        );
        return;
      }
      this.violate(seq, subject, aggregate, AuditRules.IllegalTransition, `${named} is not allowed when the job is ${j.value}`, [seq]);
      return;
    }
    const runId = runIdOf(event);
    if (runId !== null) {
      if (run.value === 'none') {
        this.violate(seq, subject, aggregate, AuditRules.IllegalTransition, `${named} names run ${runId}, but the job was never claimed (it is ${j.value})`, [seq]);
        return;
      }
      if (run.context.run_id !== runId) {
        const holds = run.value === 'running' ? `run ${String(run.context.run_id)} holds the job` : `the job's only run was ${String(run.context.run_id)}`;
        this.violate(seq, subject, aggregate, AuditRules.StaleRun, `${named} names run ${runId}, but ${holds} (claimed at seq ${job.claimSeq})`, [job.claimSeq, seq]);
        return;
      }
      if (run.value !== 'running' && CLOSING.has(event.type)) {
        this.violate(
          seq,
          subject,
          aggregate,
          AuditRules.DoubleClose,
          `${named} closes run ${runId} again: it already ended ${run.value} at seq ${job.closeSeq}`,
          [job.closeSeq, seq],
        );
        return;
      }
    }
    const ended = job.endSeq > 0 ? ` since seq ${job.endSeq}` : '';
    this.violate(seq, subject, aggregate, AuditRules.IllegalTransition, `${named} is not allowed when the job is ${j.value}${ended}`, job.endSeq > 0 ? [job.endSeq, seq] : [seq]);
  }

  /** A retry names a failed (or cancelled) job of its queue, takes the next attempt within max_attempts, and is that job's only retry. */
  private checkRetry(seq: number, subject: string, aggregate: string, job: JobAudit, event: Extract<JobEvent, { type: 'job.submitted' }>): void {
    const { retry_of: retryOf, attempt, max_attempts: maxAttempts } = event.data;
    if (retryOf === null) {
      if (attempt !== 1) this.violate(seq, subject, aggregate, AuditRules.RetryChain, `attempt ${attempt} without retry_of: a first attempt is 1`, [seq]);
      return;
    }
    if (retryOf === job.jobId) {
      this.violate(seq, subject, aggregate, AuditRules.RetryChain, `retry_of names the job itself: a cycle`, [seq]);
      return;
    }
    const original = this.subjects.get(`docket.evt.job.${job.queue}.${retryOf}`)?.job;
    if (!original || original.submitSeq === 0) {
      this.violate(seq, subject, aggregate, AuditRules.RetryChain, `retry_of names ${retryOf}, which is no earlier job of queue ${job.queue}`, [seq]);
      return;
    }
    // The retrier retries failed jobs; `docket retry` by hand also takes a cancelled one.
    const status = original.state.job.value;
    if (status !== 'failed' && status !== 'cancelled') {
      this.violate(seq, subject, aggregate, AuditRules.RetryChain, `retry of job ${retryOf}, which is ${status}, not failed or cancelled`, [original.submitSeq, seq]);
    }
    const expectedAttempt = original.state.job.context.attempt + 1;
    if (attempt !== expectedAttempt) {
      this.violate(
        seq,
        subject,
        aggregate,
        AuditRules.RetryChain,
        `attempt ${attempt} does not follow attempt ${original.state.job.context.attempt} of job ${retryOf}: expected ${expectedAttempt}`,
        [original.submitSeq, seq],
      );
    }
    if (attempt > maxAttempts) {
      this.violate(seq, subject, aggregate, AuditRules.RetryChain, `attempt ${attempt} exceeds max_attempts ${maxAttempts}`, [original.endSeq || original.submitSeq, seq]);
    }
    if (original.retriedBy !== null) {
      this.violate(
        seq,
        subject,
        aggregate,
        AuditRules.RetryChain,
        `job ${retryOf} already has retry ${original.retriedBy} (seq ${original.retrySeq}): a chain does not fork`,
        [original.retrySeq, seq],
      );
      return;
    }
    original.retriedBy = job.jobId;
    original.retrySeq = seq;
  }

  report(): AuditReport {
    return {
      ok: this.violationCount === 0,
      messages: this.messages,
      jobEvents: this.jobEvents,
      otherEvents: this.otherEvents,
      jobs: this.jobs,
      firstSeq: this.firstSeq,
      lastSeq: this.firstSeq === null ? null : this.lastSeq,
      violationCount: this.violationCount,
      byRule: { ...this.counts },
      violations: [...this.violations],
      truncated: this.violations.length < this.violationCount,
    };
  }
}

/** Audits messages given in stream order. */
export function auditMessages(messages: Iterable<RecordedMessage>, options: AuditOptions = {}): AuditReport {
  const auditor = new Auditor(options);
  auditor.pushAll(messages);
  return auditor.report();
}
