/**
 * The planner's view of a stored job (src/store/job-store.ts JobRecord), so the refresh handler
 * needs no mapping of its own. Pure. Which jobs the views still show (not removed by
 * `job.removed`) is the caller's filter: the planner must get only those.
 */
import type { JobStatus } from '../../machines/index.js';
import type { Key } from './key.js';
import { jobSetStatusOf, type PlanJob } from './plan.js';

/** The fields of a JobRecord the planner reads (JobRecord satisfies it). */
export interface PlannableRecord {
  readonly jobId: string;
  readonly state: {
    readonly job: { readonly value: JobStatus; readonly context: { readonly key: unknown; readonly created_at: string } };
    readonly run: { readonly context: { readonly started_at: string | null } };
  };
}

/** A keyed job as the planner sees it; undefined for an unkeyed job (outside refresh). */
export function planJobOf(record: PlannableRecord): PlanJob | undefined {
  const { job, run } = record.state;
  // A removed job has left the job set's views: its key is free.
  if (job.context.key === null || job.context.key === undefined || job.value === 'removed') return undefined;
  const status = jobSetStatusOf(job.value);
  return {
    jobId: record.jobId,
    key: job.context.key as Key | string,
    status,
    createdAtMs: Date.parse(job.context.created_at),
    // seed 000's reserved_time: the claim that opened the job's run.
    reservedAtMs: status === 'reserved' && run.context.started_at !== null ? Date.parse(run.context.started_at) : null,
  };
}
