/**
 * The planner's view of a stored job (src/store/job-store.ts JobRecord), so the refresh handler
 * needs no mapping of its own, and the planner's view of a queue's jobs by key over the key index. Pure. Which jobs the views still show (not removed by
 * `job.removed`) is the caller's filter: the planner must get only those.
 */
import type { JobStatus } from '../../machines/index.js';
import type { Key } from './key.js';
import type { QueueKeys } from '../projections/key-index.js';
import { jobSetStatusOf, type KeyedJobs, type OrderedPlanJob, type PlanJob } from './plan.js';

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

/**
 * The planner's KeyedJobs over the node's key index (src/projections/key-index.ts): a key's
 * slot is its entry's, and only the jobs of the keys the plan asks about are read from the
 * store, so a refresh that adds nothing touches no job record. A live view: it sees jobs
 * created after it was made.
 */
export function indexedJobs(keys: QueueKeys, recordOf: (jobId: string) => (PlannableRecord & { readonly submitSeq: number }) | undefined): KeyedJobs {
  return {
    get slotCount() {
      return keys.bySlot.length;
    },
    slotOf: (identity) => keys.byIdentity.get(identity)?.slot ?? -1,
    slotOfKey: (key) => keys.byValue.slotOf(key),
    keyAt: (slot) => {
      const key = keys.byValue.keyAt(slot);
      if (key === undefined) throw new Error(`indexedJobs: slot ${slot} holds no flat key`);
      return key as Key;
    },
    identityAt: (slot) => keys.bySlot[slot]!.identity,
    holds: (slot) => keys.bySlot[slot]!.present.length > 0,
    jobsAt: (slot) => {
      const held: OrderedPlanJob[] = [];
      for (const jobId of keys.bySlot[slot]!.present) {
        const record = recordOf(jobId);
        const job = record === undefined ? undefined : planJobOf(record);
        if (record !== undefined && job !== undefined) held.push({ job, order: record.submitSeq });
      }
      return held.sort((a, b) => a.order - b.order);
    },
  };
}
