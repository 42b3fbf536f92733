/** Read-side commands: get, list, progress. They read projections and never append. */
import { commitSeqOf, indexOf } from '../../machines/index.js';
import { NotFoundError } from '../errors.js';
import type { Progress, QueueProgress } from '../projections/progress.js';
import type { QueueIndex } from '../projections/queue-index.js';
import { historyOf, type JobRecord, type JobStore } from '../store/job-store.js';
import { Limits } from './limits.js';
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
    // The position of its job.submitted: (commit sequence, index in the commit).
    seq: commitSeqOf(record.submitSeq),
    index: indexOf(record.submitSeq),
  };
}

export function toDetail(record: JobRecord) {
  const run = record.state.run;
  return {
    job: { ...toSummary(record), params: record.state.job.context.params, backoff: record.state.job.context.backoff },
    run: run.value === 'none' ? null : { status: run.value, ...run.context },
    history: historyOf(record).map((h) => ({ seq: commitSeqOf(h.seq), index: indexOf(h.seq), type: h.type, time: h.time, id: h.id })),
  };
}

export interface QueryContext {
  readonly store: JobStore;
  readonly progress: Progress;
  readonly queueIndex: QueueIndex;
}

export function getJob(ctx: QueryContext, command: GetCommand) {
  const record = ctx.store.get(command.job_id);
  if (!record) throw new NotFoundError(`job ${command.job_id} not found`, { details: { job_id: command.job_id } });
  return toDetail(record);
}

export function listJobs(ctx: QueryContext, command: ListCommand): { jobs: JobSummary[]; next_cursor: string | null } {
  const limit = command.limit ?? Limits.DefaultListLimit;
  const jobs: JobSummary[] = [];
  let last = 0;
  for (const { seq, jobId } of ctx.queueIndex.after(command.queue, Number(command.cursor ?? 0))) {
    const record = ctx.store.get(jobId);
    if (!record || (command.status !== undefined && record.state.job.value !== command.status)) continue;
    if (jobs.length === limit) return { jobs, next_cursor: String(last) };
    jobs.push(toSummary(record));
    last = seq;
  }
  return { jobs, next_cursor: null };
}

export function progressOf(ctx: QueryContext, command: ProgressCommand): { queues: QueueProgress[] } {
  return { queues: command.queue === undefined ? ctx.progress.all() : [ctx.progress.of(command.queue)] };
}
