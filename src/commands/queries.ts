/** Read-side commands: get, list, progress. They read projections and never append. */
import { commitSeqOf, indexOf } from '../../machines/index.js';
import { NotFoundError } from '../errors.js';
import type { Progress, QueueProgress } from '../projections/progress.js';
import type { QueueIndex } from '../projections/queue-index.js';
import type { QueueOrder } from '../projections/queue-order.js';
import { historyOf, type JobRecord, type JobStore } from '../store/job-store.js';
import { errorSummary } from './error-record.js';
import { readEvictedJob, type CommitReader } from '../store/evicted-jobs.js';
import { Limits } from './limits.js';
import type { JobNodeIndex } from '../projections/job-nodes.js';
import { fanOutViewOf } from './jobnode-commands.js';
import type { GetCommand, ListCommand, ProgressCommand } from './schemas.js';

export interface JobSummary {
  readonly job_id: string;
  readonly queue: string;
  readonly status: string;
  readonly key: unknown;
  readonly priority: number;
  readonly position: number | null;
  readonly run_at: string;
  readonly attempt: number;
  readonly max_attempts: number;
  readonly retry_of: string | null;
  readonly created_at: string;
  readonly finished_at: string | null;
  readonly end_reason: string | null;
  /** A failed job's error message (seed 000's error_message: its first 2,047 characters); absent otherwise. */
  readonly error_message?: string;
  readonly seq: number;
  readonly index: number;
}

export function toSummary(record: JobRecord): JobSummary {
  const c = record.state.job.context;
  return {
    job_id: record.jobId,
    queue: record.queue,
    status: record.state.job.value,
    key: c.key,
    priority: c.priority,
    position: c.position,
    run_at: c.run_at,
    attempt: c.attempt,
    max_attempts: c.max_attempts,
    retry_of: c.retry_of,
    created_at: c.created_at,
    finished_at: c.finished_at,
    end_reason: c.end_reason,
    ...errorMessageOf(record),
    // The position of its job.submitted: (commit sequence, index in the commit).
    seq: commitSeqOf(record.submitSeq),
    index: indexOf(record.submitSeq),
  };
}

function errorMessageOf(record: JobRecord): { error_message?: string } {
  const error = record.state.job.value === 'failed' ? record.state.run.context.error : null;
  return error === null ? {} : { error_message: errorSummary(error.message) };
}

export function toDetail(record: JobRecord, budgetBytes = Infinity) {
  const run = record.state.run;
  const detail = {
    job: { ...toSummary(record), params: record.state.job.context.params, backoff: record.state.job.context.backoff },
    run: run.value === 'none' ? null : { status: run.value, ...run.context },
  };
  // A job's history has no bound of its own (a job can be moved any number of times): it gets
  // what room the job and run leave, oldest first.
  const room = new Room(budgetBytes - jsonBytes(detail));
  const history: { seq: number; index: number; type: string; time: string; id: string }[] = [];
  for (const h of historyOf(record)) {
    const entry = { seq: commitSeqOf(h.seq), index: indexOf(h.seq), type: h.type, time: h.time, id: h.id };
    if (!room.take(entry)) return { ...detail, history, truncated: true as const };
    history.push(entry);
  }
  return { ...detail, history };
}

export interface QueryContext {
  readonly store: JobStore;
  /** Fan-out jobs' nodes, for `get`; without it `get` shows no `fan_out`. */
  readonly jobNodes?: JobNodeIndex;
  readonly progress: Progress;
  readonly queueIndex: QueueIndex;
  /**
   * The queue order, on the node's clock: the `delayed` count and filter. Without it no job is
   * delayed and progress has no `delayed` field.
   */
  readonly queueOrder?: Pick<QueueOrder, 'delayedCount' | 'isDelayed'>;
  /** Bytes a reply may fill (the connection's max payload less its envelope). @defaultValue no bound */
  readonly replyBudget?: () => number;
  /** Each queue's flow control (pause, holds, held jobs by reason), for `progress`; without it progress says nothing of it. */
  readonly flowOf?: (queue: string) => Record<string, unknown>;
  /** What holds a waiting job (flow control), for `get`; without it `get` says nothing of it. */
  readonly holdOf?: (record: JobRecord) => { readonly reason: string; readonly detail: string; readonly until?: string } | null;
  /** Reads a commit by stream sequence: how `get` answers for a job whose body was evicted. */
  readonly readCommit?: CommitReader;
}

function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value));
}

/** What is left of a reply's bytes, taken item by item (each item and its comma). */
class Room {
  constructor(private left: number) {}
  take(item: unknown): boolean {
    const bytes = jsonBytes(item) + 1;
    if (bytes > this.left) return false;
    this.left -= bytes;
    return true;
  }
}

/**
 * A job's detail. A finished job whose body was evicted from memory is read back from the log
 * by its events' positions and answered the same, with `evicted: true` (the store keeps no
 * copy: reading old jobs costs no memory).
 */
export async function getJobOrEvicted(ctx: QueryContext, command: GetCommand) {
  const entry = ctx.store.get(command.job_id) === undefined ? ctx.store.evicted(command.job_id) : undefined;
  if (entry !== undefined && ctx.readCommit !== undefined) {
    return { ...toDetail(await readEvictedJob(ctx.readCommit, entry), ctx.replyBudget?.() ?? Infinity), evicted: true as const };
  }
  return getJob(ctx, command);
}

/** The detail of a job whose body is in memory. */
export function getJob(ctx: QueryContext, command: GetCommand) {
  const record = ctx.store.get(command.job_id);
  if (!record) throw new NotFoundError(`job ${command.job_id} not found`, { details: { job_id: command.job_id } });
  const held = ctx.holdOf?.(record) ?? null;
  const fanOut = fanOutViewOf(ctx, record.jobId);
  if (fanOut !== null) {
    // Nodes' results are dropped when they would not fit one reply with the job (its result names every node's status).
    const budget = ctx.replyBudget?.() ?? Infinity;
    let shown = fanOut;
    if (Buffer.byteLength(JSON.stringify(fanOut)) > budget / 2) shown = { ...fanOut, nodes: fanOut.nodes.map((n) => ({ ...n, result: null })) };
    return { ...toDetail(record, budget - Buffer.byteLength(JSON.stringify(shown))), fan_out: shown };
  }
  const detail = toDetail(record, (ctx.replyBudget?.() ?? Infinity) - (held === null ? 0 : Buffer.byteLength(JSON.stringify(held)) + 12));
  return held === null ? detail : { ...detail, held };
}

/**
 * Whether a job passes list's status filter: its state, or `delayed` (queued with its run_at not
 * yet come by the node's clock). `queued` is the state, so it includes the delayed ones.
 */
function matchesStatus(ctx: QueryContext, record: JobRecord, status: ListCommand['status']): boolean {
  if (status === undefined) return true;
  if (status === 'delayed') return record.state.job.value === 'queued' && (ctx.queueOrder?.isDelayed(record.queue, record.jobId) ?? false);
  return record.state.job.value === status;
}

/**
 * A page of the queue's jobs in submit order: up to `limit`, and no more than fit one reply
 * (jobs with large keys fill it first); `next_cursor` continues after the last one given.
 */
export function listJobs(ctx: QueryContext, command: ListCommand): { jobs: JobSummary[]; next_cursor: string | null } {
  const limit = command.limit ?? Limits.DefaultListLimit;
  const room = new Room(ctx.replyBudget?.() ?? Infinity);
  const jobs: JobSummary[] = [];
  let last = Number(command.cursor ?? 0);
  for (const { seq, jobId } of ctx.queueIndex.after(command.queue, last)) {
    const record = ctx.store.get(jobId);
    if (!record || !matchesStatus(ctx, record, command.status)) continue;
    if (jobs.length === limit) return { jobs, next_cursor: String(last) };
    const summary = toSummary(record);
    // At least one job per page, so paging always moves on; a job too big even alone is left
    // to the reply's own bound.
    if (!room.take(summary) && jobs.length > 0) return { jobs, next_cursor: String(last) };
    jobs.push(summary);
    last = seq;
  }
  return { jobs, next_cursor: null };
}

/** Progress per queue (all of them, by name), cut to what fits one reply with `truncated: true`. */
export function progressOf(ctx: QueryContext, command: ProgressCommand): { queues: QueueProgress[]; truncated?: true } {
  const order = ctx.queueOrder;
  const delayedOf = order === undefined ? undefined : (queue: string) => order.delayedCount(queue);
  // A queue never seen answers zeros (as it always has): the CLI tells people it has no jobs.
  const withFlow = (progress: QueueProgress): QueueProgress => (ctx.flowOf === undefined ? progress : { ...progress, flow: ctx.flowOf(progress.queue) });
  if (command.queue !== undefined) return { queues: [withFlow(ctx.progress.of(command.queue, delayedOf?.(command.queue)))] };
  const room = new Room(ctx.replyBudget?.() ?? Infinity);
  const queues: QueueProgress[] = [];
  for (const plain of ctx.progress.all(delayedOf)) {
    const queue = withFlow(plain);
    if (!room.take(queue)) return { queues, truncated: true };
    queues.push(queue);
  }
  return { queues };
}
