/**
 * Pure replays over recorded commits: one job's timeline with its run and retry chain, and a
 * queue as it stood at a point of the log (folded into the same JobStore, QueueOrder and
 * Progress a node keeps, with the clock set to the point's time), and the difference of two
 * points. A point is an event position (commit sequence, index in the commit). Reading the
 * commits is the caller's (src/store/read-log.ts); the chain walk takes a loader so that it
 * stays free of I/O.
 */
import { commitSeqOf, evolveAggregate, evolveJob, indexOf, initialAggregateState, INITIAL_JOB_STATE, isAggregateEvent, type FoldState, type JobNodeContext, positionOf, type JobEvent, type JobState, type Position, type QueueContext, type QueueSettings, type ReservationContext, type RunContext, type RunStatus } from '../../machines/index.js';
import { AggregateStore } from '../store/aggregate-store.js';
import { FlowCounts } from '../projections/flow.js';
import { Progress, type QueueProgress, type StatusCounts } from '../projections/progress.js';
import { QueueOrder, orderKeyOf, type OrderKey } from '../projections/queue-order.js';
import { JobStore, type JobRecord } from '../store/job-store.js';
import { decodeStoredCommit, type DecodedCommit, type DecodedEvent } from './decode.js';
import type { RecordedMessage } from './types.js';

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

// ---------------------------------------------------------------------------------------------
// One job

export interface StateView {
  readonly job: string;
  readonly run: string;
}

export interface TimelineEntry {
  /** Stream sequence of the commit holding the event. */
  readonly seq: number;
  /** The event's index in its commit; null for a commit that could not be read at all. */
  readonly index: number | null;
  /** When the server stored the event. */
  readonly stored_at: string;
  /** The event's own time (the deciding node's clock). */
  readonly time: string;
  readonly type: string;
  readonly event_id: string | null;
  /** false when the machines refuse the event (a tampered log): the state does not move. */
  readonly accepted: boolean;
  readonly before: StateView;
  readonly after: StateView;
  readonly data: unknown;
  /** Set for an undecodable event (or commit). */
  readonly problem?: string;
  /** A fan-out job's node event: which node, and the node's state before and after (the job's stays). */
  readonly jobnode?: { readonly id: string; readonly node: string; readonly before: string; readonly after: string };
}

/** A fan-out job's node as its events leave it. */
export interface TimelineNode {
  readonly node: string;
  readonly jobnode_id: string;
  readonly status: string;
  readonly attempt: number;
  readonly claims: number;
}

/** A run as replay shows it: the run machine's context, its status, its duration, how many artifacts. */
export type RunView = Omit<RunContext, 'artifacts'> & {
  readonly status: RunStatus;
  readonly duration_ms: number | null;
  readonly artifacts: number;
};

export interface JobTimeline {
  readonly job_id: string;
  readonly queue: string;
  /** The subject of the job's partition (`docket.log.q.<queue>`). */
  readonly subject: string;
  readonly status: string;
  readonly attempt: number;
  readonly max_attempts: number;
  readonly retry_of: string | null;
  readonly priority: number;
  readonly position: number | null;
  readonly run_at: string;
  readonly created_at: string;
  readonly finished_at: string | null;
  readonly end_reason: string | null;
  readonly key: unknown;
  readonly params: unknown;
  readonly events: readonly TimelineEntry[];
  readonly run: RunView | null;
  /** Where job.submitted is (the last part of the order key): its commit's sequence and its index. */
  readonly submit_seq: number;
  readonly submit_index: number;
  /** The final fold state (for explain and chains). */
  readonly state: JobState;
  /** A fan-out job's nodes (their events are in `events`); null for an ordinary job. */
  readonly fan_out: { readonly quorum: number; readonly nodes: readonly TimelineNode[] } | null;
}

function stateView(state: JobState): StateView {
  return { job: state.job.value, run: state.run.value };
}

function runView(state: JobState): RunView | null {
  if (state.run.value === 'none') return null;
  const r = state.run.context;
  const started = r.started_at === null ? NaN : Date.parse(r.started_at);
  const finished = r.finished_at === null ? NaN : Date.parse(r.finished_at);
  return {
    run_id: r.run_id,
    status: state.run.value,
    worker: r.worker,
    host: r.host,
    pid: r.pid,
    version: r.version,
    user: r.user,
    connection_id: r.connection_id,
    lease_ms: r.lease_ms,
    started_at: r.started_at,
    finished_at: r.finished_at,
    // The worker's own measure when it sent one; else the leader's times of claim and end.
    duration_ms: r.duration_ms ?? (Number.isFinite(started) && Number.isFinite(finished) ? finished - started : null),
    failure_reason: r.failure_reason,
    error: r.error,
    exit_code: r.exit_code,
    result: r.result,
    artifacts: r.artifacts.length,
  };
}

/**
 * Folds one job's events from `messages` (commits in stream order; events of other aggregates
 * are skipped) into its timeline; null when none of them is an event of `jobId`. Commits of its
 * partition that cannot be read at all are shown too: they may have held its events.
 */
export function jobTimeline(messages: Iterable<RecordedMessage>, jobId: string): JobTimeline | null {
  let state = INITIAL_JOB_STATE;
  let subject: string | null = null;
  let queue = '';
  let submitAt: Position = 0;
  const events: TimelineEntry[] = [];
  // A fan-out job's nodes, by job node id: learnt from their jobnode.created, which names the job.
  const nodes = new Map<string, { state: FoldState<JobNodeContext>; claims: number }>();
  const problem = (m: RecordedMessage, index: number | null, reason: string): void => {
    const now = stateView(state);
    events.push({ seq: m.seq, index, stored_at: iso(m.time), time: '', type: 'undecodable', event_id: null, accepted: false, before: now, after: now, data: null, problem: reason });
  };
  for (const m of messages) {
    if (subject !== null && m.subject !== subject) continue;
    const decoded = decodeStoredCommit(m);
    if (!decoded.ok) {
      if (subject !== null) problem(m, null, `commit: ${decoded.reason}`);
      continue;
    }
    const evs = decoded.events;
    for (let i = 0; i < evs.length; i++) {
      const d = evs[i]!;
      if (d.kind === 'undecodable') {
        if (d.aggregate === `job:${jobId}`) problem(m, i, d.reason);
        continue;
      }
      if (d.kind === 'other' && d.aggregateKind === 'jobnode' && subject !== null && isAggregateEvent(d.event)) {
        const event = d.event;
        const known = nodes.get(d.aggregateId);
        if (known === undefined && !(event.type === 'jobnode.created' && event.data.job_id === jobId)) continue;
        const before = known?.state ?? (initialAggregateState('jobnode') as FoldState<JobNodeContext>);
        const next = evolveAggregate(before, event) as FoldState<JobNodeContext> | null;
        const after = next ?? before;
        nodes.set(d.aggregateId, { state: after, claims: (known?.claims ?? 0) + (next !== null && event.type === 'jobnode.claimed' ? 1 : 0) });
        const now = stateView(state);
        events.push({ seq: m.seq, index: i, stored_at: iso(m.time), time: event.time, type: event.type, event_id: event.id, accepted: next !== null, before: now, after: now, data: event.data, jobnode: { id: d.aggregateId, node: after.context.node, before: before.value, after: after.value } });
        continue;
      }
      if (d.kind !== 'job' || d.jobId !== jobId) continue;
      subject ??= m.subject;
      queue = d.queue;
      const event = d.event;
      const before = stateView(state);
      const next = evolveJob(state, event);
      if (next !== null && event.type === 'job.submitted') submitAt = positionOf(m.seq, i);
      if (next !== null) state = next;
      events.push({ seq: m.seq, index: i, stored_at: iso(m.time), time: event.time, type: event.type, event_id: event.id, accepted: next !== null, before, after: stateView(state), data: event.data });
    }
  }
  if (subject === null) return null;
  const c = state.job.context;
  return {
    job_id: jobId,
    queue,
    subject,
    status: state.job.value,
    attempt: c.attempt,
    max_attempts: c.max_attempts,
    retry_of: c.retry_of,
    priority: c.priority,
    position: c.position,
    run_at: c.run_at,
    created_at: c.created_at,
    finished_at: c.finished_at,
    end_reason: c.end_reason,
    key: c.key,
    params: c.params,
    events,
    run: runView(state),
    submit_seq: commitSeqOf(submitAt),
    submit_index: indexOf(submitAt),
    state,
    fan_out:
      nodes.size === 0
        ? null
        : {
            quorum: [...nodes.values()][0]!.state.context.quorum,
            nodes: [...nodes].map(([id, n]) => ({ node: n.state.context.node, jobnode_id: id, status: n.state.value, attempt: n.state.context.attempt, claims: n.claims })),
          },
  };
}

export interface ChainLink {
  readonly job_id: string;
  readonly attempt: number;
  readonly status: string;
  readonly retry_of: string | null;
  readonly created_at: string;
  readonly run_at: string;
  readonly finished_at: string | null;
  readonly failure_reason: string | null;
  readonly error: string | null;
  readonly run_id: string | null;
  readonly submit_seq: number;
  readonly submit_index: number;
}

export interface JobReplay {
  readonly job: JobTimeline;
  /** The whole retry chain, first attempt first, this job included. */
  readonly chain: readonly ChainLink[];
  /** The job this one retries, and the job that retries this one. */
  readonly retry_of: string | null;
  readonly retried_by: string | null;
}

function chainLink(t: JobTimeline): ChainLink {
  return {
    job_id: t.job_id,
    attempt: t.attempt,
    status: t.status,
    retry_of: t.retry_of,
    created_at: t.created_at,
    run_at: t.run_at,
    finished_at: t.finished_at,
    failure_reason: t.run?.failure_reason ?? t.end_reason,
    error: t.run?.error?.message ?? null,
    run_id: t.run?.run_id ?? null,
    submit_seq: t.submit_seq,
    submit_index: t.submit_index,
  };
}

/**
 * Loads the commits that hold one job's events (any queue), in stream order. They may hold
 * other events too: the timeline takes the job's own.
 */
export type JobLoader = (jobId: string) => Promise<readonly RecordedMessage[]>;

/** Caps a chain walk: a tampered log could make retry_of loop through ids. */
const MAX_CHAIN = 1000;

/**
 * A job's timeline and its retry chain both ways: back through `retry_of`, forward through the
 * derived retry id (`retryIdOf(failed job id, failed job's attempt)`, as the retrier derives it:
 * DESIGN's "a retry's id from (failed job, attempt)"), accepted only when that job's `retry_of`
 * names this one.
 */
export async function replayJob(
  jobId: string,
  load: JobLoader,
  retryIdOf: (failedJobId: string, failedAttempt: number) => string,
): Promise<JobReplay | null> {
  const job = jobTimeline(await load(jobId), jobId);
  if (job === null) return null;
  const seen = new Set<string>([job.job_id]);
  const back: JobTimeline[] = [];
  for (let id = job.retry_of; id !== null && !seen.has(id) && back.length < MAX_CHAIN; ) {
    seen.add(id);
    const t = jobTimeline(await load(id), id);
    if (t === null) break;
    back.unshift(t);
    id = t.retry_of;
  }
  const forward: JobTimeline[] = [];
  for (let current = job; forward.length < MAX_CHAIN; ) {
    const id = retryIdOf(current.job_id, current.attempt);
    if (seen.has(id)) break;
    seen.add(id);
    const t = jobTimeline(await load(id), id);
    if (t === null || t.retry_of !== current.job_id) break;
    forward.push(t);
    current = t;
  }
  return {
    job,
    chain: [...back, job, ...forward].map(chainLink),
    retry_of: job.retry_of,
    retried_by: forward[0]?.job_id ?? null,
  };
}

// ---------------------------------------------------------------------------------------------
// A queue at a point

export interface ReadyJobView {
  readonly job_id: string;
  readonly priority: number;
  /** The order key's position: the moved-to position, else the job.submitted event's position. */
  readonly position: number;
  /** Where job.submitted is: its commit's sequence and its index (the order key's last part). */
  readonly seq: number;
  readonly index: number;
  readonly run_at: string;
  readonly attempt: number;
}

export interface DelayedJobView {
  readonly job_id: string;
  readonly run_at: string;
}

export interface RunningRunView {
  readonly job_id: string;
  readonly run_id: string | null;
  readonly worker: string | null;
  readonly host: string | null;
  readonly pid: number | null;
  readonly version: string | null;
  readonly started_at: string | null;
  readonly lease_ms: number | null;
  readonly attempt: number;
}

export interface QueueView {
  readonly queue: string;
  /** The point: the commit sequence folded up to. */
  readonly seq: number;
  /** The last event folded of that commit; null for the whole commit. */
  readonly index: number | null;
  /** The clock of the point: which delayed jobs had come due. */
  readonly at: string;
  readonly ready: readonly ReadyJobView[];
  readonly delayed: readonly DelayedJobView[];
  readonly running: readonly RunningRunView[];
  readonly progress: QueueProgress;
  /** The queue's own state at the point: paused or active, its flow-control settings, its active reservation. */
  readonly state: { readonly status: string; readonly paused_reason: string | null; readonly settings: QueueSettings; readonly reservation: { readonly reservation_id: string; readonly holder: string; readonly expires_at: string } | null };
  /** Events the machines refused, and events (or commits) that could not be read: run `docket audit`. */
  readonly refused: number;
  readonly undecodable: number;
}

/**
 * The node's own projections, folded from a queue's commits. `view()` reads them with the clock
 * at `atMs` (settable, so that one fold can be viewed at several times).
 */
export class QueueReplay {
  readonly store = new JobStore();
  /** The queue's own aggregates (the queue, its reservation), folded from the same commits. */
  readonly aggregates = new AggregateStore();
  /** Running jobs and recent claims, for flow control's holds (explain). */
  readonly counts: FlowCounts;
  readonly order: QueueOrder;
  readonly progress = new Progress();
  atMs: number;
  /** The last commit sequence seen of the queue's partition. */
  seq = 0;
  /** The last event position folded (or skipped); -1 before the first. */
  position: Position = -1;
  undecodable = 0;
  private readonly subject: string;

  constructor(
    readonly queue: string,
    atMs: number,
  ) {
    this.atMs = atMs;
    this.subject = `docket.log.q.${queue}`;
    this.order = new QueueOrder(() => this.atMs, (jobId) => this.store.get(jobId));
    this.counts = new FlowCounts((queue) => this.aggregates.stateOf<QueueContext>('queue', queue).context.settings);
    this.store.onChange(this.order.apply);
    this.store.onChange(this.progress.apply);
    this.store.onChange(this.counts.apply);
  }

  /** Whether a commit is of this queue's partition (others are ignored). */
  holds(message: RecordedMessage): boolean {
    return message.subject === this.subject;
  }

  /** Folds one commit (commits of other partitions are ignored). */
  push(message: RecordedMessage): void {
    if (!this.holds(message) || message.seq <= this.seq) return;
    this.pushDecoded(message, decodeStoredCommit(message));
  }

  /** `push` for a caller that decoded the commit already (explain looks before it folds). */
  pushDecoded(message: RecordedMessage, decoded: DecodedCommit): void {
    if (!this.holds(message) || message.seq <= this.seq) return;
    if (!decoded.ok) {
      this.seq = message.seq;
      this.undecodable += 1;
      return;
    }
    const events = decoded.events;
    for (let i = 0; i < events.length; i++) this.pushEvent(positionOf(message.seq, i), events[i]!);
    this.seq = message.seq;
  }

  /** Folds one event of the queue's partition at `position` (at most once). Returns the job event folded, if any. */
  pushEvent(position: Position, decoded: DecodedEvent): JobEvent | null {
    if (position <= this.position) return null;
    this.position = position;
    this.seq = commitSeqOf(position);
    if (decoded.kind !== 'job') {
      if (decoded.kind === 'undecodable') this.undecodable += 1;
      else if (isAggregateEvent(decoded.event) && decoded.event.queue === this.queue) this.aggregates.apply(position, decoded.event);
      return null;
    }
    if (decoded.queue !== this.queue) return null;
    this.store.apply({ seq: position, queue: decoded.queue, jobId: decoded.jobId, event: decoded.event });
    return decoded.event;
  }

  private stateView(): QueueView['state'] {
    const queue = this.aggregates.stateOf<QueueContext>('queue', this.queue);
    const reservation = this.aggregates.stateOf<ReservationContext>('reservation', this.queue);
    const r = reservation.context;
    return {
      status: queue.value,
      paused_reason: queue.context.paused_reason,
      settings: queue.context.settings,
      reservation: reservation.value === 'active' ? { reservation_id: r.reservation_id ?? '', holder: r.holder ?? '', expires_at: r.expires_at ?? '' } : null,
    };
  }

  pushAll(messages: Iterable<RecordedMessage>): this {
    for (const m of messages) this.push(m);
    return this;
  }

  /** The order key a queued job has now. */
  orderKey(jobId: string): OrderKey | null {
    const record = this.store.get(jobId);
    return record ? orderKeyOf(record) : null;
  }

  view(): QueueView {
    const snapshot = this.order.snapshot(this.queue);
    const ready: ReadyJobView[] = [];
    for (const jobId of snapshot.ready) {
      const record = this.store.get(jobId)!;
      const key = orderKeyOf(record);
      const c = record.state.job.context;
      ready.push({ job_id: jobId, priority: key.priority, position: key.position, seq: commitSeqOf(key.seq), index: indexOf(key.seq), run_at: c.run_at, attempt: c.attempt });
    }
    const delayed = snapshot.delayed.map((d) => ({ job_id: d.jobId, run_at: iso(d.runAtMs) }));
    const running: RunningRunView[] = [];
    const byStart: JobRecord[] = [];
    for (const record of this.store.values()) {
      if (record.queue === this.queue && record.state.job.value === 'running') byStart.push(record);
    }
    byStart.sort((a, b) => a.seq - b.seq);
    for (const record of byStart) {
      const r = record.state.run.context;
      running.push({
        job_id: record.jobId,
        run_id: r.run_id,
        worker: r.worker,
        host: r.host,
        pid: r.pid,
        version: r.version,
        started_at: r.started_at,
        lease_ms: r.lease_ms,
        attempt: record.state.job.context.attempt,
      });
    }
    return {
      queue: this.queue,
      seq: this.seq,
      index: null,
      at: iso(this.atMs),
      ready,
      delayed,
      running,
      progress: this.progress.of(this.queue),
      state: this.stateView(),
      refused: this.store.refused + this.aggregates.refused,
      undecodable: this.undecodable,
    };
  }
}

/** The queue as it stood after `messages` (commits in stream order, up to the point), with the clock at `atMs`. */
export function queueAt(queue: string, messages: Iterable<RecordedMessage>, atMs: number): QueueView {
  return new QueueReplay(queue, atMs).pushAll(messages).view();
}

// ---------------------------------------------------------------------------------------------
// The difference of two points

export interface QueueDiff {
  readonly queue: string;
  readonly from: { readonly seq: number; readonly index: number | null; readonly at: string };
  readonly to: { readonly seq: number; readonly index: number | null; readonly at: string };
  readonly ready: {
    readonly added: readonly string[];
    readonly removed: readonly string[];
    /** Jobs in both whose place in the ready order changed (0 is the head). */
    readonly moved: readonly { readonly job_id: string; readonly from: number; readonly to: number }[];
  };
  readonly delayed: { readonly added: readonly string[]; readonly removed: readonly string[] };
  readonly running: { readonly started: readonly string[]; readonly ended: readonly string[] };
  /** Per state, the count at `to` minus the count at `from` (states that did not change are left out). */
  readonly progress: Partial<Record<keyof StatusCounts, number>>;
}

function added(a: readonly string[], b: readonly string[]): string[] {
  const inA = new Set(a);
  return b.filter((id) => !inA.has(id));
}

export function diffQueueViews(a: QueueView, b: QueueView): QueueDiff {
  const readyA = a.ready.map((r) => r.job_id);
  const readyB = b.ready.map((r) => r.job_id);
  const indexA = new Map(readyA.map((id, i) => [id, i]));
  const indexB = new Map(readyB.map((id, i) => [id, i]));
  // A move is a change of relative order, not of index: jobs leaving the head shift every index.
  const common = readyB.filter((id) => indexA.has(id));
  const rankA = new Map(readyA.filter((id) => indexB.has(id)).map((id, i) => [id, i]));
  const moved: { job_id: string; from: number; to: number }[] = [];
  for (let i = 0; i < common.length; i++) {
    const id = common[i]!;
    if (rankA.get(id) !== i) moved.push({ job_id: id, from: indexA.get(id)!, to: indexB.get(id)! });
  }
  const delayedA = a.delayed.map((d) => d.job_id);
  const delayedB = b.delayed.map((d) => d.job_id);
  const runA = a.running.map((r) => r.job_id);
  const runB = b.running.map((r) => r.job_id);
  const progress: Partial<Record<keyof StatusCounts, number>> = {};
  for (const status of Object.keys(b.progress.counts) as (keyof StatusCounts)[]) {
    const delta = b.progress.counts[status] - a.progress.counts[status];
    if (delta !== 0) progress[status] = delta;
  }
  return {
    queue: b.queue,
    from: { seq: a.seq, index: a.index, at: a.at },
    to: { seq: b.seq, index: b.index, at: b.at },
    ready: { added: added(readyA, readyB), removed: added(readyB, readyA), moved },
    delayed: { added: added(delayedA, delayedB), removed: added(delayedB, delayedA) },
    running: { started: added(runA, runB), ended: added(runB, runA) },
    progress,
  };
}
