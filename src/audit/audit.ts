/**
 * The audit: reads stored commits in stream order, checks each partition's chain of commits
 * (the expected-sequence guard, the writer epochs and the hash chain), and folds every event
 * through the same machines that decided it (job events with `evolveJob`, the fast fold derived
 * from the machines and proven equal to them), checking every aggregate against the rules in
 * ./types.ts. Pure: messages in, violations out; reading the stream is src/store/read-log.ts's job.
 *
 * Each commit is decoded once (one JSON.parse) and its payload hashed once, as stored: the
 * events are never re-serialised. A refused event is skipped (the aggregate keeps the state it
 * had, as every node's fold does), so one tampered event gives one violation, not a cascade
 * through the rest of its history.
 */
import { commitSeqOf, deriveGroupEnd, FAN_OUT_WORKER, memberEnd, type ScheduleContext, type TemplateContext, type JobStatus, isLiveStatus, evolveAggregate, evolveJob, indexOf, initialAggregateState, INITIAL_JOB_STATE, isAggregateEvent, positionOf, type FoldState, type GroupContext, type GroupMember, type JobEvent, type JobState, type Position, type QueueContext, type ReservationContext } from '../../machines/index.js';
import { commitHash } from '../nats/codec.js';
import { scheduledJobId } from '../ids.js';
import { EXPECTED_HEADER, MSG_ID_HEADER, subjects, SYS_PARTITION } from '../nats/subjects.js';
import { ScheduleAudit } from './schedule-audit.js';
import { decodeStoredCommit, partitionAggregate, type DecodedEvent } from './decode.js';
import { AUDIT_RULES, AuditRules, type AuditOptions, type AuditReport, type AuditRule, type EventRef, type RecordedMessage, type Violation } from './types.js';

/** What the audit keeps per partition: the chain's tip, and the partition's jobs. */
interface PartitionState {
  /** Stream sequence of the partition's last stored commit (decodable or not): what the next commit must expect. */
  lastSeq: number;
  /** SHA-256 of that commit's payload: what the next commit's prev_hash must be. */
  lastHash: string | null;
  /** The highest writer epoch seen in the partition. */
  epoch: number;
  epochSeq: number;
  readonly jobs: Map<string, JobAudit>;
  /** Non-job aggregates by `<kind>:<id>`, folded through their machines. */
  readonly aggregates: Map<string, FoldState<unknown>>;
  /** Flow control as the log stands: running jobs in all and per concurrency_key, recent claim times. */
  running: number;
  readonly runningByKey: Map<string, number>;
  readonly claimTimes: number[];
  readonly keyClaimTimes: Map<string, number[]>;
}

interface JobAudit {
  readonly queue: string;
  readonly jobId: string;
  state: JobState;
  /** Position of the accepted job.submitted; 0 before it. */
  submitAt: Position;
  /** Position of the accepted job.claimed that opened the run. */
  claimAt: Position;
  /** Position of the event that closed the run. */
  closeAt: Position;
  /** Position of the event that ended the job (terminal state). */
  endAt: Position;
  /** The retry created for this job's failure, and its submit position. */
  retriedBy: string | null;
  retryAt: Position;
}

const CLOSING = new Set(['job.succeeded', 'job.failed', 'job.skipped', 'job.cancelled']);
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'skipped', 'ignored']);
/** Kinds whose aggregates live in a queue's partition (DESIGN: "Partitions"); the others live in sys. */
/** Adds a claim time, keeping the last `limit + 1` (enough to see a window over its limit); amortised O(1). */
function keepClaim(times: number[], time: number, limit: number): void {
  times.push(time);
  if (times.length > 2 * (limit + 1)) times.splice(0, times.length - (limit + 1));
}

/** Claims in (time - period, time], counted from the newest back: at most limit + 1 looked at. */
function claimsWithin(times: readonly number[], time: number, rate: { readonly limit: number; readonly period_ms: number }): number {
  let count = 0;
  for (let i = times.length - 1; i >= 0 && count <= rate.limit; i--) if (times[i]! > time - rate.period_ms) count += 1;
  return count;
}

const SYS_SUBJECT = subjects.partition(SYS_PARTITION);

const QUEUE_KINDS = new Set(['job', 'queue', 'reservation', 'jobnode']);

function emptyCounts(): Record<AuditRule, number> {
  const counts = {} as Record<AuditRule, number>;
  for (const rule of AUDIT_RULES) counts[rule] = 0;
  return counts;
}

function runIdOf(event: JobEvent): string | null {
  const d = event.data as { run_id?: unknown };
  return typeof d.run_id === 'string' ? d.run_id : null;
}

function ref(position: Position): EventRef {
  return { seq: commitSeqOf(position), index: indexOf(position) };
}

/** `seq:index`, as violations and the CLI print a position. */
export function formatPosition(position: Position): string {
  return `${commitSeqOf(position)}:${indexOf(position)}`;
}

function commitRef(seq: number): EventRef {
  return { seq, index: null };
}

/**
 * Incremental auditor: `push` commits in stream order (duplicates and older sequences are
 * ignored), then `report()`. Keeps one small record per partition and per job.
 */
export class Auditor {
  private readonly partitions = new Map<string, PartitionState>();
  private readonly violations: Violation[] = [];
  private readonly counts = emptyCounts();
  private readonly fromSeq: number;
  private readonly toSeq: number;
  private readonly maxViolations: number;
  private messages = 0;
  private events = 0;
  private jobEvents = 0;
  private otherEvents = 0;
  private jobs = 0;
  private firstSeq: number | null = null;
  private lastSeq = 0;
  private violationCount = 0;
  /** The commit being pushed: its subject, for the violations it gives. */
  private subject = '';
  /** Fires' jobs and ticks' coverage, judged against the commits' times. */
  private readonly schedules = new ScheduleAudit({
    violate: (seq, index, subject, aggregate, rule, message, events) => this.violate(seq, index, aggregate, rule, message, events.map(ref), subject),
    jobStatus: (jobId) => {
      const job = this.anyJob(jobId);
      return job === undefined || job.submitAt === 0 ? null : job.state.job.value;
    },
    template: (name) => (this.partitions.get(SYS_SUBJECT)?.aggregates.get(`template:${name}`)?.context as TemplateContext | undefined) ?? null,
  });
  private finished: { pendingFires: number } | null = null;

  constructor(options: AuditOptions = {}) {
    this.fromSeq = options.fromSeq ?? 1;
    this.toSeq = options.toSeq ?? Number.MAX_SAFE_INTEGER;
    this.maxViolations = options.maxViolations ?? 10_000;
  }

  private violate(seq: number, index: number | null, aggregate: string, rule: AuditRule, message: string, events: readonly EventRef[], subject = this.subject): void {
    if (seq < this.fromSeq || seq > this.toSeq) return;
    this.violationCount += 1;
    this.counts[rule] += 1;
    if (this.violations.length < this.maxViolations) this.violations.push({ seq, index, subject, aggregate, rule, message, events });
  }

  /** A violation of event `position`. */
  private violateAt(position: Position, aggregate: string, rule: AuditRule, message: string, events: readonly Position[]): void {
    this.violate(commitSeqOf(position), indexOf(position), aggregate, rule, message, events.map(ref));
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
    this.subject = subject;

    let st = this.partitions.get(subject);
    if (st === undefined) {
      st = { lastSeq: 0, lastHash: null, epoch: -Infinity, epochSeq: 0, jobs: new Map(), aggregates: new Map(), running: 0, runningByKey: new Map(), claimTimes: [], keyClaimTimes: new Map() };
      this.partitions.set(subject, st);
    }
    const previousSeq = st.lastSeq;
    const previousHash = st.lastHash;
    st.lastSeq = seq;
    // The payload as stored, hashed once: the next commit's prev_hash names exactly these bytes.
    st.lastHash = message.hash ?? commitHash(message.data);

    const decoded = decodeStoredCommit(message);
    const partitionName = decoded.partition ?? subject;
    const aggregate = partitionAggregate(decoded.partition, subject);
    const before = previousSeq > 0 ? [commitRef(previousSeq), commitRef(seq)] : [commitRef(seq)];

    // The chain by sequence: every commit expects its partition's previous stream sequence (0 for the first).
    const expected = message.expectedLastSubjectSeq;
    if (expected === null || message.msgId === null) {
      const missing = [expected === null ? EXPECTED_HEADER : '', message.msgId === null ? MSG_ID_HEADER : ''].filter((h) => h !== '').join(' and ');
      this.violate(seq, null, aggregate, AuditRules.UnguardedAppend, `commit appended without ${missing}: nothing guarded its place in partition ${partitionName}`, before);
    }
    if (expected !== null && expected !== previousSeq) {
      if (expected > previousSeq) {
        this.violate(
          seq,
          null,
          aggregate,
          AuditRules.SequenceGap,
          `commit expected the partition's previous commit at seq ${expected}, but partition ${partitionName} holds ${previousSeq === 0 ? 'nothing before it' : `seq ${previousSeq} there`}: a commit is missing`,
          before,
        );
      } else {
        this.violate(
          seq,
          null,
          aggregate,
          AuditRules.SequenceReorder,
          `commit expected the partition's previous commit at seq ${expected}, but seq ${previousSeq} came between: appended out of order or inserted`,
          expected > 0 ? [commitRef(expected), commitRef(previousSeq), commitRef(seq)] : before,
        );
      }
    }

    if (!decoded.ok) {
      this.violate(seq, null, aggregate, AuditRules.Undecodable, decoded.reason, [commitRef(seq)]);
      return;
    }
    const { commit, partition, queue, events } = decoded;

    // The chain by hash: prev_hash is the SHA-256 of the partition's previous commit as stored.
    if (commit.prev_hash !== previousHash) {
      const what =
        previousSeq === 0
          ? `the partition holds no commit before it, so prev_hash must be null, not ${String(commit.prev_hash)}: its predecessor is gone`
          : commit.prev_hash === null
            ? `prev_hash is null, but the partition's previous commit is seq ${previousSeq}: a commit was inserted`
            : `prev_hash ${commit.prev_hash.slice(0, 12)}… is not the hash of the partition's previous commit (seq ${previousSeq}, ${previousHash!.slice(0, 12)}…): seq ${previousSeq} was edited, or a commit before this one was deleted or inserted`;
      this.violate(seq, null, aggregate, AuditRules.HashChain, `commit ${commit.commit}: ${what}`, before);
    }
    if (commit.writer.epoch < st.epoch) {
      this.violate(
        seq,
        null,
        aggregate,
        AuditRules.WriterEpoch,
        `commit ${commit.commit} by ${commit.writer.node} at epoch ${commit.writer.epoch}, after epoch ${st.epoch} wrote seq ${st.epochSeq}: a deposed writer's commit`,
        [commitRef(st.epochSeq), commitRef(seq)],
      );
    } else if (commit.writer.epoch > st.epoch) {
      st.epoch = commit.writer.epoch;
      st.epochSeq = seq;
    }
    if (commit.partition !== partition) {
      this.violate(seq, null, aggregate, AuditRules.EnvelopeMismatch, `commit ${commit.commit} says partition ${commit.partition} but is stored in ${partition}`, [commitRef(seq)]);
    }
    if (message.msgId !== null && message.msgId !== commit.commit) {
      this.violate(seq, null, aggregate, AuditRules.EnvelopeMismatch, `commit id ${commit.commit} differs from its Nats-Msg-Id ${message.msgId}`, [commitRef(seq)]);
    }

    const isSys = partition === SYS_PARTITION;
    const time = commitTime(events);
    if (isSys) this.schedules.sysCommit(seq, commit.writer.node, commit.writer.epoch, time);
    else this.schedules.queueCommit(queue, time);
    for (let i = 0; i < events.length; i++) {
      this.events += 1;
      this.pushEvent(positionOf(seq, i), partition, queue, isSys, st, events[i]!);
    }
  }

  private pushEvent(position: Position, partition: string, queue: string, isSys: boolean, st: PartitionState, decoded: DecodedEvent): void {
    if (decoded.kind === 'undecodable') {
      this.violateAt(position, decoded.aggregate, AuditRules.Undecodable, decoded.reason, [position]);
      return;
    }
    if (decoded.kind === 'other') {
      this.otherEvents += 1;
      const { aggregateKind, aggregateId, event } = decoded;
      const aggregate = `${aggregateKind}:${aggregateId}`;
      const queueKind = QUEUE_KINDS.has(aggregateKind);
      if (queueKind === isSys) {
        this.violateAt(position, aggregate, AuditRules.EnvelopeMismatch, `${event.type}: a ${aggregateKind} event belongs in ${queueKind ? 'a queue partition' : 'partition sys'}, not ${partition}`, [position]);
      } else if (queueKind && event.queue !== queue) {
        this.violateAt(position, aggregate, AuditRules.EnvelopeMismatch, `${event.type} says queue ${String(event.queue)} but is stored in partition ${partition}`, [position]);
      }
      if (isAggregateEvent(event)) {
        const before = st.aggregates.get(aggregate) ?? initialAggregateState(event.aggregate.kind);
        const after = evolveAggregate(before, event);
        if (after === null) this.violateAt(position, aggregate, AuditRules.IllegalTransition, `${event.type} (event ${event.id}) refused by the ${aggregateKind} machine in state ${before.value}`, [position]);
        else {
          st.aggregates.set(aggregate, after);
          if (event.type === 'jobnode.claimed') this.checkNodeClaim(position, aggregate, st, queue, event.id);
          if (event.type === 'group.created') event.data.members.forEach((m, index) => this.groupMembers.set(m.job_id, { group: event.aggregate.id, index, members: event.data.members, mode: event.data.mode }));
          if (event.type === 'group.ended') this.checkGroupEnd(position, aggregate, after as FoldState<GroupContext>, event.data.status);
          if (event.type === 'schedule.fired') this.checkFire(position, aggregate, event.aggregate.id, event.data);
          if (event.type === 'schedule.fired' || event.type === 'schedule.missed') this.schedules.handled(position, this.subject, aggregate, before.context as ScheduleContext, event);
        }
      }
      return;
    }
    this.pushJob(position, partition, st, decoded);
  }

  /** Envelope checks, the fold through the machines, and the rules a job event can break. */
  private pushJob(position: Position, partition: string, st: PartitionState, decoded: Extract<DecodedEvent, { kind: 'job' }>): void {
    this.jobEvents += 1;
    const { event, queue, jobId } = decoded;
    const aggregate = `job:${jobId}`;
    let job = st.jobs.get(jobId);
    if (job === undefined) {
      job = { queue, jobId, state: INITIAL_JOB_STATE, submitAt: 0, claimAt: 0, closeAt: 0, endAt: 0, retriedBy: null, retryAt: 0 };
      st.jobs.set(jobId, job);
    }
    if (event.queue !== queue || queue === '') {
      this.violateAt(position, aggregate, AuditRules.EnvelopeMismatch, `${event.type} says queue ${String(event.queue)} but is stored in partition ${partition}`, [position]);
    }
    if (event.type === 'job.submitted' && event.data.job_id !== jobId) {
      this.violateAt(position, aggregate, AuditRules.EnvelopeMismatch, `job.submitted says job ${event.data.job_id} but its aggregate is job ${jobId}`, [position]);
    }

    const before = job.state;
    const after = evolveJob(before, event);
    if (after === null) {
      this.refused(position, aggregate, job, event);
      return;
    }

    switch (event.type) {
      case 'job.submitted':
        job.submitAt = position;
        this.jobs += 1;
        this.schedules.jobSubmitted(jobId);
        this.checkRetry(position, aggregate, st, job, event);
        break;
      case 'job.released':
        this.checkDependencies(position, aggregate, after.job.context.depends_on ?? []);
        break;
      case 'job.claimed':
        job.claimAt = position;
        this.checkGroupOrder(position, aggregate, jobId);
        this.checkFlow(position, aggregate, st, queue, jobId, event, after.job.context.concurrency_key);
        break;
      default:
        if (CLOSING.has(event.type) && before.run.value === 'running' && after.run.value !== 'running') job.closeAt = position;
    }
    if (!TERMINAL.has(before.job.value) && TERMINAL.has(after.job.value)) job.endAt = position;
    if (before.job.value === 'running' && after.job.value !== 'running') {
      st.running -= 1;
      const key = after.job.context.concurrency_key;
      if (key !== null) st.runningByKey.set(key, (st.runningByKey.get(key) ?? 1) - 1);
    }
    job.state = after;
  }

  /** The (schedule, tick) pairs fired (cron and backfill fires; a manual trigger has its own id), with where. */
  private readonly fired = new Map<string, Position>();

  /** A cron or backfill fire's job id is derived from (schedule, tick), and a tick fires once. */
  private checkFire(at: Position, aggregate: string, schedule: string, data: { readonly tick: string; readonly job_id: string; readonly trigger?: string }): void {
    if (data.trigger === 'manual') return;
    const expected = scheduledJobId(schedule, data.tick);
    if (data.job_id !== expected) this.violateAt(at, aggregate, AuditRules.ScheduleRule, `schedule.fired of tick ${data.tick} names job ${data.job_id}, not the id derived from (schedule, tick): ${expected}`, [at]);
    const key = `${schedule}\u0000${data.tick}`;
    const earlier = this.fired.get(key);
    if (earlier !== undefined) this.violateAt(at, aggregate, AuditRules.ScheduleRule, `tick ${data.tick} of schedule ${schedule} fired a second time (first at ${formatPosition(earlier)})`, [earlier, at]);
    else this.fired.set(key, at);
  }

  /** A group's members, by member job id (members live in queue partitions, the group in sys). */
  private readonly groupMembers = new Map<string, { group: string; index: number; members: readonly GroupMember[]; mode: string }>();

  /** The recorded end equals seed 003's derivation from the members' statuses (each its retry chain's last attempt) at that point of the log. */
  private checkGroupEnd(at: Position, aggregate: string, group: FoldState<GroupContext>, status: string): void {
    const statuses = group.context.members.map((m) => this.chainAt(m.job_id, at)?.state.job.value ?? null);
    // A member outside the audited range cannot be judged.
    if (statuses.some((s) => s === null)) return;
    const derived = deriveGroupEnd(group.context.members.map((m, i) => memberEnd(this.anyJob(m.job_id)?.state.job.value ?? null, statuses[i]!)));
    if (derived !== status) this.violateAt(at, aggregate, AuditRules.GroupRule, `group.ended says ${status}, but its members then (${statuses.join(', ')}) derive ${derived ?? 'not ended'}`, [at]);
  }

  /** A sequential group's member is claimed only once the member before it has ended. */
  private checkGroupOrder(at: Position, aggregate: string, jobId: string): void {
    const member = this.groupMembers.get(jobId);
    if (member === undefined || member.mode !== 'sequential' || member.index === 0) return;
    const previous = this.chainAt(member.members[member.index - 1]!.job_id, at);
    if (previous === undefined || TERMINAL.has(previous.state.job.value)) return;
    this.violateAt(at, aggregate, AuditRules.GroupRule, `member ${member.index} of sequential group ${member.group} claimed while member ${member.index - 1} (${previous.jobId}) was ${previous.state.job.value}`, [at]);
  }

  /** The schedules of the sys partition as folded now. */
  private *sysSchedules(): Generator<{ name: string; status: string; context: ScheduleContext }> {
    const sys = this.partitions.get(SYS_SUBJECT);
    if (sys === undefined) return;
    for (const [key, state] of sys.aggregates) if (key.startsWith('schedule:')) yield { name: key.slice('schedule:'.length), status: state.value, context: state.context as ScheduleContext };
  }

  /** A job of any partition, by id (dependencies name jobs of other queues). */
  private anyJob(jobId: string): JobAudit | undefined {
    for (const st of this.partitions.values()) {
      const job = st.jobs.get(jobId);
      if (job) return job;
    }
    return undefined;
  }

  /** The last attempt of a job's retry chain at `at` (the job itself when it has no retry then). */
  private chainAt(jobId: string, at: Position): JobAudit | undefined {
    let job = this.anyJob(jobId);
    for (let hops = 0; job?.retriedBy != null && job.retryAt < at && hops < 10_000; hops++) job = this.anyJob(job.retriedBy);
    return job;
  }

  /** Each dependency (followed along its retry chain) had succeeded before the release. */
  private checkDependencies(at: Position, aggregate: string, dependsOn: readonly string[]): void {
    for (const dependencyId of dependsOn) {
      const dependency = this.chainAt(dependencyId, at);
      // A dependency outside the audited range (another queue's partition, an earlier stretch) cannot be judged.
      if (dependency === undefined || (dependency.state.job.value === 'succeeded' && dependency.endAt < at)) continue;
      this.violateAt(at, aggregate, AuditRules.ReleasedBeforeDependencies, `job.released before its dependency ${dependencyId} had succeeded (it was ${dependency.state.job.value})`, [dependency.submitAt, at]);
    }
  }

  /**
   * A claim against the queue's state at that point of the log: not while paused or reserved
   * (the reservation's direct job excepted), and within the limits then set.
   */
  private checkFlow(at: Position, aggregate: string, st: PartitionState, queue: string, jobId: string, event: Extract<JobEvent, { type: 'job.claimed' }>, key: string | null): void {
    const named = `job.claimed (event ${event.id})`;
    const queueState = (st.aggregates.get(`queue:${queue}`) ?? initialAggregateState('queue')) as FoldState<QueueContext>;
    const reservation = (st.aggregates.get(`reservation:${queue}`) ?? initialAggregateState('reservation')) as FoldState<ReservationContext>;
    // The reservation's own job runs ahead of the queue: neither held nor limited. So does a
    // fan-out job's own run (the leader's, opened with its submit; its nodes' claims are held).
    const direct = (reservation.value === 'active' && reservation.context.job_id === jobId) || event.data.worker === FAN_OUT_WORKER;
    if (queueState.value === 'paused' && !direct) this.violateAt(at, aggregate, AuditRules.ClaimWhileHeld, `${named} while queue ${queue} was paused`, [at]);
    if (reservation.value === 'active' && !direct) {
      this.violateAt(at, aggregate, AuditRules.ClaimWhileHeld, `${named} while queue ${queue} was reserved by ${String(reservation.context.holder)} (${String(reservation.context.reservation_id)})`, [at]);
    }
    const { concurrency, rate, key_concurrency, key_rate } = queueState.context.settings;
    const time = Date.parse(event.time);
    st.running += 1;
    if (!direct && concurrency !== null && st.running > concurrency) this.violateAt(at, aggregate, AuditRules.LimitExceeded, `${named}: ${st.running} running in queue ${queue}, over its concurrency ${concurrency}`, [at]);
    // Claim times are kept only while a rate is set (as the dispatcher counts them), at most as many as the rate can look at.
    if (rate === null) st.claimTimes.length = 0;
    else {
      keepClaim(st.claimTimes, time, rate.limit);
      const inWindow = claimsWithin(st.claimTimes, time, rate);
      if (!direct && inWindow > rate.limit) this.violateAt(at, aggregate, AuditRules.LimitExceeded, `${named}: ${inWindow} claims in queue ${queue} within ${rate.period_ms} ms, over its rate ${rate.limit}`, [at]);
    }
    if (key === null) return;
    const runningOfKey = (st.runningByKey.get(key) ?? 0) + 1;
    st.runningByKey.set(key, runningOfKey);
    if (!direct && key_concurrency !== null && runningOfKey > key_concurrency) this.violateAt(at, aggregate, AuditRules.LimitExceeded, `${named}: ${runningOfKey} running with key ${key}, over the key concurrency ${key_concurrency}`, [at]);
    if (key_rate === null) {
      st.keyClaimTimes.delete(key);
      return;
    }
    let times = st.keyClaimTimes.get(key);
    if (times === undefined) st.keyClaimTimes.set(key, (times = []));
    keepClaim(times, time, key_rate.limit);
    const inWindow = claimsWithin(times, time, key_rate);
    if (!direct && inWindow > key_rate.limit) this.violateAt(at, aggregate, AuditRules.LimitExceeded, `${named}: ${inWindow} claims with key ${key} within ${key_rate.period_ms} ms, over the key rate ${key_rate.limit}`, [at]);
  }

  /** A fan-out job node's claim: not while its queue is paused or reserved (its limits count jobs, not nodes). */
  private checkNodeClaim(at: Position, aggregate: string, st: PartitionState, queue: string, eventId: string): void {
    const queueState = (st.aggregates.get(`queue:${queue}`) ?? initialAggregateState('queue')) as FoldState<QueueContext>;
    const reservation = (st.aggregates.get(`reservation:${queue}`) ?? initialAggregateState('reservation')) as FoldState<ReservationContext>;
    const named = `jobnode.claimed (event ${eventId})`;
    if (queueState.value === 'paused') this.violateAt(at, aggregate, AuditRules.ClaimWhileHeld, `${named} while queue ${queue} was paused`, [at]);
    if (reservation.value === 'active') this.violateAt(at, aggregate, AuditRules.ClaimWhileHeld, `${named} while queue ${queue} was reserved by ${String(reservation.context.holder)}`, [at]);
  }

  /** Names the most specific rule the machines' refusal of `event` breaks. */
  private refused(at: Position, aggregate: string, job: JobAudit, event: JobEvent): void {
    const { job: j, run } = job.state;
    const named = `${event.type} (event ${event.id})`;
    if (j.value === 'new') {
      this.violateAt(at, aggregate, AuditRules.IllegalTransition, `${named} for a job that was never submitted`, [at]);
      return;
    }
    if (event.type === 'job.submitted') {
      this.violateAt(at, aggregate, AuditRules.IllegalTransition, `${named} for a job already submitted at ${formatPosition(job.submitAt)}`, [job.submitAt, at]);
      return;
    }
    if (event.type === 'job.claimed') {
      if (run.value === 'running') {
        this.violateAt(
          at,
          aggregate,
          AuditRules.TwoOpenRuns,
          `${named} opens run ${event.data.run_id} while run ${String(run.context.run_id)} (claimed at ${formatPosition(job.claimAt)}) is still open`,
          [job.claimAt, at],
        );
        return;
      }
      if (j.value === 'queued' && Date.parse(event.time) < Date.parse(j.context.run_at)) {
        this.violateAt(at, aggregate, AuditRules.ClaimedBeforeRunAt, `${named} at ${event.time}, before the job's run_at ${j.context.run_at}`, [job.submitAt, at]);
        return;
      }
      this.violateAt(at, aggregate, AuditRules.IllegalTransition, `${named} is not allowed when the job is ${j.value}`, [at]);
      return;
    }
    const runId = runIdOf(event);
    if (runId !== null) {
      if (run.value === 'none') {
        this.violateAt(at, aggregate, AuditRules.IllegalTransition, `${named} names run ${runId}, but the job was never claimed (it is ${j.value})`, [at]);
        return;
      }
      if (run.context.run_id !== runId) {
        const holds = run.value === 'running' ? `run ${String(run.context.run_id)} holds the job` : `the job's only run was ${String(run.context.run_id)}`;
        this.violateAt(at, aggregate, AuditRules.StaleRun, `${named} names run ${runId}, but ${holds} (claimed at ${formatPosition(job.claimAt)})`, [job.claimAt, at]);
        return;
      }
      if (run.value !== 'running' && CLOSING.has(event.type)) {
        this.violateAt(at, aggregate, AuditRules.DoubleClose, `${named} closes run ${runId} again: it already ended ${run.value} at ${formatPosition(job.closeAt)}`, [job.closeAt, at]);
        return;
      }
    }
    const ended = job.endAt > 0 ? ` since ${formatPosition(job.endAt)}` : '';
    this.violateAt(at, aggregate, AuditRules.IllegalTransition, `${named} is not allowed when the job is ${j.value}${ended}`, job.endAt > 0 ? [job.endAt, at] : [at]);
  }

  /** A retry names a failed (or cancelled) job of its queue, takes the next attempt within max_attempts, and is that job's only retry. */
  private checkRetry(at: Position, aggregate: string, st: PartitionState, job: JobAudit, event: Extract<JobEvent, { type: 'job.submitted' }>): void {
    const { retry_of: retryOf, attempt, max_attempts: maxAttempts } = event.data;
    if (retryOf === null) {
      if (attempt !== 1) this.violateAt(at, aggregate, AuditRules.RetryChain, `attempt ${attempt} without retry_of: a first attempt is 1`, [at]);
      return;
    }
    if (retryOf === job.jobId) {
      this.violateAt(at, aggregate, AuditRules.RetryChain, `retry_of names the job itself: a cycle`, [at]);
      return;
    }
    // A retry stays in its queue, so in its partition.
    const original = st.jobs.get(retryOf);
    if (!original || original.submitAt === 0) {
      this.violateAt(at, aggregate, AuditRules.RetryChain, `retry_of names ${retryOf}, which is no earlier job of queue ${job.queue}`, [at]);
      return;
    }
    // The retrier retries failed jobs; `docket retry` by hand also takes a cancelled one.
    const status = original.state.job.value;
    if (status !== 'failed' && status !== 'cancelled') {
      this.violateAt(at, aggregate, AuditRules.RetryChain, `retry of job ${retryOf}, which is ${status}, not failed or cancelled`, [original.submitAt, at]);
    }
    const expectedAttempt = original.state.job.context.attempt + 1;
    if (attempt !== expectedAttempt) {
      this.violateAt(
        at,
        aggregate,
        AuditRules.RetryChain,
        `attempt ${attempt} does not follow attempt ${original.state.job.context.attempt} of job ${retryOf}: expected ${expectedAttempt}`,
        [original.submitAt, at],
      );
    }
    if (attempt > maxAttempts) {
      this.violateAt(at, aggregate, AuditRules.RetryChain, `attempt ${attempt} exceeds max_attempts ${maxAttempts}`, [original.endAt || original.submitAt, at]);
    }
    if (original.retriedBy !== null) {
      this.violateAt(
        at,
        aggregate,
        AuditRules.RetryChain,
        `job ${retryOf} already has retry ${original.retriedBy} (at ${formatPosition(original.retryAt)}): a chain does not fork`,
        [original.retryAt, at],
      );
      return;
    }
    original.retriedBy = job.jobId;
    original.retryAt = at;
  }

  report(): AuditReport {
    // The end-of-log schedule rules run once, at the first report.
    this.finished ??= this.schedules.finish(this.sysSchedules());
    return {
      ok: this.violationCount === 0,
      messages: this.messages,
      events: this.events,
      jobEvents: this.jobEvents,
      otherEvents: this.otherEvents,
      jobs: this.jobs,
      partitions: this.partitions.size,
      firstSeq: this.firstSeq,
      lastSeq: this.firstSeq === null ? null : this.lastSeq,
      violationCount: this.violationCount,
      pendingFires: this.finished.pendingFires,
      byRule: { ...this.counts },
      violations: [...this.violations],
      truncated: this.violations.length < this.violationCount,
    };
  }
}

/** A commit's time: its last event's, on its writer's clock (NaN when no event carries one). */
function commitTime(events: readonly DecodedEvent[]): number {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (e.kind !== 'undecodable') return Date.parse(e.event.time);
  }
  return Number.NaN;
}

/** Audits commits given in stream order. */
export function auditMessages(messages: Iterable<RecordedMessage>, options: AuditOptions = {}): AuditReport {
  const auditor = new Auditor(options);
  auditor.pushAll(messages);
  return auditor.report();
}
