/**
 * The Job machine: the only definition of a job's legal transitions. Pure: no clock, no ids,
 * no I/O; time and ids arrive on the events. Guards and the context reducer are named so that
 * the fast fold (fold.ts) can derive its table from this machine instead of restating it.
 */
import { assign, setup } from 'xstate';
import type { JsonObject } from './envelope.js';
import type { BackoffPolicy, JobEvent, JobKey } from './job.events.js';

export type JobStatus =
  | 'new'
  | 'waiting'
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  | 'skipped'
  | 'ignored'
  | 'removed';

const LIVE = ['waiting', 'queued', 'running'] as const satisfies readonly JobStatus[];
const TERMINAL = ['succeeded', 'failed', 'cancelled', 'skipped', 'ignored'] as const satisfies readonly JobStatus[];
export const LIVE_JOB_STATUSES: readonly JobStatus[] = LIVE;
export const TERMINAL_JOB_STATUSES: readonly JobStatus[] = TERMINAL;
/** The terminal statuses as a literal tuple (for validators such as clean's `status`). */
export const TERMINAL_STATUS_NAMES = TERMINAL;
/**
 * Every status a job in the views can be in (all but `new` and `removed`), in lifecycle order:
 * what progress counts and list filters on. A removed job has left the views (its log stays).
 */
export const JOB_STATUSES = [...LIVE, ...TERMINAL] as const;
/** A job's status as `get` shows it: any of the above, or `removed`. */
export const SHOWN_JOB_STATUSES = [...JOB_STATUSES, 'removed'] as const;
/** The statuses a job may be removed from (`job.removed`): ended, or not yet running. Never running. */
export const REMOVABLE_JOB_STATUSES = ['waiting', 'queued', ...TERMINAL] as const satisfies readonly JobStatus[];

export function isLiveStatus(status: JobStatus): boolean {
  return LIVE_JOB_STATUSES.includes(status);
}

export interface JobContext {
  readonly job_id: string;
  readonly queue: string;
  readonly key: JobKey | null;
  readonly params: JsonObject;
  readonly priority: number;
  /** null: the stream sequence of job.submitted (see JobSubmittedData.position). */
  readonly position: number | null;
  readonly run_at: string;
  readonly max_attempts: number;
  readonly backoff: BackoffPolicy;
  readonly attempt: number;
  readonly retry_of: string | null;
  readonly created_at: string;
  readonly finished_at: string | null;
  /** Why the job ended without success (cancel/ignore/skip reason, or the failure reason). */
  readonly end_reason: string | null;
  /** Flow control's key (JobSubmittedData.concurrency_key), or null. */
  readonly concurrency_key: string | null;
  /** The jobs it waits for (JobSubmittedData.depends_on), or null. */
  readonly depends_on: readonly string[] | null;
}

export const EMPTY_JOB: JobContext = {
  job_id: '',
  queue: '',
  key: null,
  params: {},
  priority: 0,
  position: null,
  run_at: '',
  max_attempts: 1,
  backoff: { base_ms: 0, max_ms: 0, jitter: 0 },
  attempt: 0,
  retry_of: null,
  created_at: '',
  finished_at: null,
  end_reason: null,
  concurrency_key: null,
  depends_on: null,
};

/** A job's context as it ends: as it was, with its end. One literal of every field (EMPTY_JOB's order), as runAfterStart in job-run.machine.ts. */
function jobEnded(c: JobContext, finished_at: string | null, end_reason: string | null): JobContext {
  return {
    job_id: c.job_id,
    queue: c.queue,
    key: c.key,
    params: c.params,
    priority: c.priority,
    position: c.position,
    run_at: c.run_at,
    max_attempts: c.max_attempts,
    backoff: c.backoff,
    attempt: c.attempt,
    retry_of: c.retry_of,
    created_at: c.created_at,
    finished_at,
    end_reason,
    concurrency_key: c.concurrency_key,
    depends_on: c.depends_on,
  };
}

/** The context effect of every accepted job event: written once, used by the machine and the fast fold. */
export function applyJobEvent(context: JobContext, event: JobEvent): JobContext {
  switch (event.type) {
    case 'job.submitted': {
      const d = event.data;
      return {
        job_id: d.job_id,
        queue: event.queue ?? '',
        key: d.key,
        params: d.params,
        priority: d.priority,
        position: d.position,
        run_at: d.run_at,
        max_attempts: d.max_attempts,
        backoff: d.backoff,
        attempt: d.attempt,
        retry_of: d.retry_of,
        created_at: event.time,
        finished_at: null,
        end_reason: null,
        concurrency_key: d.concurrency_key ?? null,
        depends_on: d.depends_on ?? null,
      };
    }
    case 'job.moved':
      return { ...context, priority: event.data.priority, position: event.data.position, ...(event.data.run_at === undefined ? {} : { run_at: event.data.run_at }) };
    case 'job.succeeded':
      return jobEnded(context, event.time, context.end_reason);
    case 'job.failed':
    case 'job.cancelled':
    case 'job.ignored':
    case 'job.skipped':
      return jobEnded(context, event.time, event.data.reason);
    case 'job.removed':
      // The job's own ending (time, reason) is kept; a job removed before it ended ends here.
      // Why it was removed is the event's (the history and the log say it).
      return context.finished_at === null ? jobEnded(context, event.time, context.end_reason) : context;
    case 'job.released':
    case 'job.claimed':
    case 'job.artifact_added':
      return context;
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

type GuardArgs = { context: JobContext; event: JobEvent };

export const jobGuards = {
  /** A job is never claimed before its run_at. */
  isDue: ({ context, event }: GuardArgs) => Date.parse(event.time) >= Date.parse(context.run_at),
  /** A job submitted with `waiting` starts in `waiting` until released. */
  startsWaiting: ({ event }: GuardArgs) => event.type === 'job.submitted' && event.data.waiting,
};

/** A job leaves the views: from a terminal state, or from waiting/queued (never running). */
const REMOVE = { 'job.removed': { target: 'removed', actions: 'apply' } } as const;

export const jobMachine = setup({
  types: { context: {} as JobContext, events: {} as JobEvent },
  guards: jobGuards,
  actions: { apply: assign(({ context, event }) => applyJobEvent(context, event)) },
}).createMachine({
  id: 'job',
  initial: 'new',
  context: EMPTY_JOB,
  states: {
    new: {
      description: 'The subject is empty: the submit appends with expected sequence 0.',
      on: {
        'job.submitted': [
          { guard: 'startsWaiting', target: 'waiting', actions: 'apply' },
          { target: 'queued', actions: 'apply' },
        ],
      },
    },
    waiting: {
      description: 'Held back by a dependency or group order until released.',
      on: {
        'job.released': { target: 'queued', actions: 'apply' },
        'job.moved': { target: 'waiting', actions: 'apply' },
        'job.cancelled': { target: 'cancelled', actions: 'apply' },
        'job.ignored': { target: 'ignored', actions: 'apply' },
        'job.skipped': { target: 'skipped', actions: 'apply' },
        ...REMOVE,
      },
    },
    queued: {
      description: 'In its queue, ordered by (priority, position, stream sequence) once run_at has come.',
      on: {
        'job.moved': { target: 'queued', actions: 'apply' },
        'job.claimed': { guard: 'isDue', target: 'running', actions: 'apply' },
        'job.cancelled': { target: 'cancelled', actions: 'apply' },
        'job.ignored': { target: 'ignored', actions: 'apply' },
        'job.skipped': { target: 'skipped', actions: 'apply' },
        ...REMOVE,
      },
    },
    // No job.removed: a running job is held by its run; cancel it first.
    running: {
      description: 'Held by exactly one run; params are immutable from here on.',
      on: {
        'job.succeeded': { target: 'succeeded', actions: 'apply' },
        'job.failed': { target: 'failed', actions: 'apply' },
        'job.cancelled': { target: 'cancelled', actions: 'apply' },
        'job.skipped': { target: 'skipped', actions: 'apply' },
        'job.artifact_added': { target: 'running', actions: 'apply' },
      },
    },
    // Terminal: a retry is a new job, so nothing returns to `queued`. They are not `final`
    // only because a closed run may still append artifacts (seed 002 INV-002).
    succeeded: { description: 'Terminal.', on: { 'job.artifact_added': { target: 'succeeded', actions: 'apply' }, ...REMOVE } },
    failed: { description: 'Terminal; a retry is a new job with retry_of.', on: { 'job.artifact_added': { target: 'failed', actions: 'apply' }, ...REMOVE } },
    cancelled: { description: 'Terminal.', on: { 'job.artifact_added': { target: 'cancelled', actions: 'apply' }, ...REMOVE } },
    skipped: { description: 'Terminal.', on: { 'job.artifact_added': { target: 'skipped', actions: 'apply' }, ...REMOVE } },
    ignored: { description: 'Terminal: DataJoint ignore, never run.', on: { ...REMOVE } },
    removed: {
      type: 'final',
      description: 'Gone from every view (progress, list, queue order, key index); the log keeps it, get and explain show it. Nothing follows.',
    },
  },
});
