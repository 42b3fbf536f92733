/**
 * The JobNode machine (kind `jobnode`, seed 004): one per (fan-out job, worker node). A fan-out
 * job's submit commit creates one JobNode per node; the node's workers claim it, run their local
 * work and complete or fail it through the worker protocol by run id, as for a job's run.
 *
 *   new -> queued -> running -> completed | failed | retrying (-> queued again after the backoff)
 *   queued | retrying | running -> skipped (the job ended without it) | cancelled (the job was cancelled)
 *
 * The job's own end follows its nodes by `fanOutVerdict` below: the one definition of the quorum
 * rule, read by the leader's coordinator (src/reactors/fan-out.ts) and by the tests. Pure: time
 * and ids arrive on the events.
 */
import { assign, setup } from 'xstate';
import type { Envelope, Json } from './envelope.js';
import type { BackoffPolicy, FailureReason, JobError } from './job.events.js';
import { backoffDelayMs } from './retry-policy.js';

/** The worker name of a fan-out job's own run: the leader holds it while the job's nodes run. */
export const FAN_OUT_WORKER = 'docket:fan-out';

/** A fan-out job's nodes decide it once this long has passed since the first of them completed (seed 004: 10 s). */
export const DEFAULT_QUORUM_TIMEOUT_MS = 10_000;

/** The fan-out recorded on a job's `job.submitted`: the nodes chosen (so a replay sees the same set) and the quorum. */
export interface FanOutSpec {
  readonly nodes: readonly string[];
  readonly quorum: number;
  readonly quorum_timeout_ms: number;
}

/** The default quorum of `n` nodes: a strict majority, floor(n/2)+1 (seed 004). */
export function defaultQuorum(n: number): number {
  return Math.floor(n / 2) + 1;
}

export interface JobNodeCreatedData {
  readonly job_id: string;
  readonly node: string;
  /** How many nodes the job fanned out to, and how many must complete. */
  readonly of: number;
  readonly quorum: number;
  readonly quorum_timeout_ms: number;
  /** The job's retry policy, applied to this node's runs. */
  readonly max_attempts: number;
  readonly backoff: BackoffPolicy;
}

export interface JobNodeClaimedData {
  readonly run_id: string;
  readonly worker: string;
  readonly host: string;
  readonly pid: number;
  readonly lease_ms: number;
}

export interface JobNodeRunEndedData {
  readonly run_id: string;
  readonly reason: FailureReason;
  readonly error: JobError | null;
}

export type JobNodeEvent =
  | Envelope<'jobnode.created', JobNodeCreatedData>
  | Envelope<'jobnode.claimed', JobNodeClaimedData>
  | Envelope<'jobnode.completed', { readonly run_id: string; readonly result: Json; readonly duration_ms?: number }>
  | Envelope<'jobnode.retrying', JobNodeRunEndedData & { readonly retry_at: string }>
  | Envelope<'jobnode.failed', JobNodeRunEndedData>
  | Envelope<'jobnode.requeued', Record<string, never>>
  | Envelope<'jobnode.skipped', { readonly reason: string }>
  | Envelope<'jobnode.cancelled', { readonly reason: string | null }>;

export const JOBNODE_EVENT_TYPES = [
  'jobnode.created',
  'jobnode.claimed',
  'jobnode.completed',
  'jobnode.retrying',
  'jobnode.failed',
  'jobnode.requeued',
  'jobnode.skipped',
  'jobnode.cancelled',
] as const satisfies readonly JobNodeEvent['type'][];

export type JobNodeStatus = 'new' | 'queued' | 'running' | 'completed' | 'failed' | 'retrying' | 'skipped' | 'cancelled';

/** A node that has not ended: it may still complete. */
export const LIVE_JOBNODE_STATUSES: readonly JobNodeStatus[] = ['new', 'queued', 'running', 'retrying'];

/** What `jobnode.created` said of the node, then its runs. */
export interface JobNodeContext extends JobNodeCreatedData {
  /** Runs claimed so far (the current one included). */
  readonly attempt: number;
  readonly run_id: string | null;
  readonly worker: string | null;
  readonly lease_ms: number | null;
  readonly started_at: string | null;
  readonly finished_at: string | null;
  readonly retry_at: string | null;
  readonly result: Json;
  readonly error: JobError | null;
  /** Why it ended otherwise than completed (a failure reason, or the skip or cancel reason). */
  readonly reason: string | null;
}

export const EMPTY_JOBNODE: JobNodeContext = {
  job_id: '',
  node: '',
  of: 0,
  quorum: 0,
  quorum_timeout_ms: DEFAULT_QUORUM_TIMEOUT_MS,
  max_attempts: 1,
  backoff: { base_ms: 0, max_ms: 0, jitter: 0 },
  attempt: 0,
  run_id: null,
  worker: null,
  lease_ms: null,
  started_at: null,
  finished_at: null,
  retry_at: null,
  result: null,
  error: null,
  reason: null,
};

export function applyJobNodeEvent(context: JobNodeContext, event: JobNodeEvent): JobNodeContext {
  switch (event.type) {
    case 'jobnode.created': {
      const d = event.data;
      return { ...EMPTY_JOBNODE, job_id: d.job_id, node: d.node, of: d.of, quorum: d.quorum, quorum_timeout_ms: d.quorum_timeout_ms, max_attempts: d.max_attempts, backoff: d.backoff };
    }
    case 'jobnode.claimed':
      return { ...context, attempt: context.attempt + 1, run_id: event.data.run_id, worker: event.data.worker, lease_ms: event.data.lease_ms, started_at: event.time, retry_at: null, error: null, reason: null };
    case 'jobnode.completed':
      return { ...context, finished_at: event.time, result: event.data.result };
    case 'jobnode.retrying':
      return { ...context, retry_at: event.data.retry_at, error: event.data.error, reason: event.data.reason };
    case 'jobnode.failed':
      return { ...context, finished_at: event.time, error: event.data.error, reason: event.data.reason };
    case 'jobnode.requeued':
      return context;
    case 'jobnode.skipped':
    case 'jobnode.cancelled':
      return { ...context, finished_at: event.time, reason: event.data.reason };
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

type GuardArgs = { context: JobNodeContext; event: JobNodeEvent };

const namesCurrentRun = ({ context, event }: GuardArgs) => 'run_id' in event.data && event.data.run_id === context.run_id;

export const jobNodeGuards = {
  /** Fencing: a run's end must name the run holding the node. */
  isCurrentRun: namesCurrentRun,
  /** A failed run is retried while the job's max_attempts leaves room (and the error allows it). */
  isCurrentRunWithAttemptsLeft: (args: GuardArgs) => namesCurrentRun(args) && args.context.attempt < args.context.max_attempts && !(args.event.type === 'jobnode.retrying' && args.event.data.error?.retryable === false),
  /** A retrying node is queued again at its retry_at, never before. */
  isRetryDue: ({ context, event }: GuardArgs) => context.retry_at !== null && Date.parse(event.time) >= Date.parse(context.retry_at),
};

const ENDED_BY_JOB = {
  'jobnode.skipped': { target: 'skipped', actions: 'apply' },
  'jobnode.cancelled': { target: 'cancelled', actions: 'apply' },
} as const;

export const jobNodeMachine = setup({
  types: { context: {} as JobNodeContext, events: {} as JobNodeEvent },
  guards: jobNodeGuards,
  actions: { apply: assign(({ context, event }) => applyJobNodeEvent(context, event)) },
}).createMachine({
  id: 'jobnode',
  initial: 'new',
  context: EMPTY_JOBNODE,
  states: {
    new: { description: 'Created with its job, in the same commit.', on: { 'jobnode.created': { target: 'queued', actions: 'apply' } } },
    queued: {
      description: "Waits for a worker of its node to claim it.",
      on: { 'jobnode.claimed': { target: 'running', actions: 'apply' }, ...ENDED_BY_JOB },
    },
    running: {
      description: 'Held by one run under a lease (one run at a time).',
      on: {
        'jobnode.completed': { guard: 'isCurrentRun', target: 'completed', actions: 'apply' },
        'jobnode.retrying': { guard: 'isCurrentRunWithAttemptsLeft', target: 'retrying', actions: 'apply' },
        'jobnode.failed': { guard: 'isCurrentRun', target: 'failed', actions: 'apply' },
        ...ENDED_BY_JOB,
      },
    },
    retrying: {
      description: "A run failed with attempts left: queued again at retry_at (the job's backoff).",
      on: { 'jobnode.requeued': { guard: 'isRetryDue', target: 'queued', actions: 'apply' }, ...ENDED_BY_JOB },
    },
    completed: { type: 'final', description: 'Terminal: its local work is done.' },
    failed: { type: 'final', description: 'Terminal: its last attempt failed.' },
    skipped: { type: 'final', description: 'Terminal: the job ended (quorum reached or lost, or its quorum timeout) before this node ended.' },
    cancelled: { type: 'final', description: 'Terminal: the job was cancelled.' },
  },
});

/**
 * How a node's failed run ends: retried (with the job's backoff from this attempt) while attempts
 * are left and the error is retryable, else failed. The machine's guards refuse the other choice.
 */
export function nodeRunFailure(context: JobNodeContext, jobNodeId: string, nowMs: number, error: JobError | null): { readonly type: 'jobnode.retrying'; readonly retry_at_ms: number } | { readonly type: 'jobnode.failed' } {
  if (context.attempt < context.max_attempts && error?.retryable !== false) {
    return { type: 'jobnode.retrying', retry_at_ms: nowMs + backoffDelayMs(context.backoff, context.attempt, jobNodeId) };
  }
  return { type: 'jobnode.failed' };
}

export type FanOutVerdict = 'pending' | 'succeeded' | 'failed';

/**
 * The quorum rule (seed 004), the one definition of a fan-out job's end from its nodes:
 * - failed as soon as the quorum can no longer be reached (completed + live < quorum);
 * - succeeded once at least `quorum` nodes completed and every other node has ended;
 * - pending otherwise. `of` counts nodes not yet folded as live.
 */
export function fanOutVerdict(of: number, quorum: number, statuses: readonly JobNodeStatus[]): FanOutVerdict {
  let completed = 0;
  let live = of - statuses.length;
  for (const status of statuses) {
    if (status === 'completed') completed += 1;
    else if (LIVE_JOBNODE_STATUSES.includes(status)) live += 1;
  }
  if (completed + live < quorum) return 'failed';
  if (live > 0) return 'pending';
  return completed >= quorum ? 'succeeded' : 'failed';
}

/** When the nodes still live are skipped: `quorum_timeout_ms` after the first node completed; null before any did. */
export function quorumDeadlineMs(nodes: readonly { readonly value: string; readonly context: JobNodeContext }[]): number | null {
  let first: number | null = null;
  for (const node of nodes) {
    if (node.value !== 'completed' || node.context.finished_at === null) continue;
    const at = Date.parse(node.context.finished_at);
    if (first === null || at < first) first = at;
  }
  return first === null ? null : first + (nodes[0]?.context.quorum_timeout_ms ?? DEFAULT_QUORUM_TIMEOUT_MS);
}
