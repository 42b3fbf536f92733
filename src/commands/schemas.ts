/**
 * The command schemas: the validators and the TypeScript types of the wire. Unknown fields are
 * refused. The JSON Schemas in schemas/ (shipped in the package) are generated from these by
 * `npm run schemas` (src/commands/json-schemas.ts); a test keeps them current.
 */
import { z } from 'zod';
import { JOB_STATUSES, Priority, TERMINAL_STATUS_NAMES, type JsonObject } from '../../machines/index.js';
import { ID_TOKEN, NODE_NAME, QUEUE_NAME } from '../nats/subjects.js';
import { Limits } from './limits.js';

/**
 * JSON data as sent, checked by hand rather than with z.record: records drop a `__proto__` key,
 * and recursive schemas overflow the stack on deep input. Depth is bounded instead.
 */
function isJson(value: unknown, depth: number): boolean {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return true;
  if (typeof value === 'number') return Number.isFinite(value);
  if (depth >= Limits.MaxJsonDepth || typeof value !== 'object') return false;
  if (Array.isArray(value)) return value.every((item) => isJson(item, depth + 1));
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return false;
  return Object.values(value as Record<string, unknown>).every((item) => isJson(item, depth + 1));
}
const jsonMessage = `must be JSON nested at most ${Limits.MaxJsonDepth} deep`;
/** Exported for the JSON Schema generator, which describes what JSON Schema cannot check. */
export const jsonValue = z.custom<unknown>((v) => isJson(v, 0), jsonMessage);
export const jsonObject = z.custom<Record<string, unknown>>(
  (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && isJson(v, 0),
  `must be a JSON object nested at most ${Limits.MaxJsonDepth} deep`,
);
/**
 * Whether `value` (already checked to be JSON) is at most `max` bytes once encoded. A bound is
 * summed first (6 bytes per UTF-16 unit of a string, the longest escape; 25 per number, as in
 * -0.0000010000000000000002), and the value is encoded only when the bound is over: a bulk
 * submit's small params are checked without a second JSON.stringify each (it was ~3% of the
 * node's CPU in a bulk submit).
 */
export function jsonBytesAtMost(value: unknown, max: number): boolean {
  return jsonBytesBound(value, max) <= max || Buffer.byteLength(JSON.stringify(value)) <= max;
}

/** An upper bound of the value's JSON bytes, or Infinity once past `cap`. */
function jsonBytesBound(value: unknown, cap: number): number {
  if (value === null || value === undefined || typeof value === 'boolean') return 5;
  if (typeof value === 'number') return 25;
  if (typeof value === 'string') return 2 + 6 * value.length;
  let total = 2;
  if (Array.isArray(value)) {
    for (const item of value) {
      total += 1 + jsonBytesBound(item, cap - total);
      if (total > cap) return Infinity;
    }
    return total;
  }
  for (const key in value as Record<string, unknown>) {
    total += 4 + 6 * key.length + jsonBytesBound((value as Record<string, unknown>)[key], cap - total);
    if (total > cap) return Infinity;
  }
  return total;
}

export const queueName = z.string().regex(QUEUE_NAME, 'must match [A-Za-z0-9_-]{1,64}');
export const idToken = z.string().regex(ID_TOKEN, 'must be 1-128 characters of [A-Za-z0-9_-]');
export const commandId = z.string().min(1).max(200);
export const nodeName = z.string().regex(NODE_NAME, 'must be 1-128 characters of [A-Za-z0-9_.:-]');
/** Fan-out (seed 004): the job runs once on each node; see README "Fan-out jobs". */
export const fanOutSchema = z
  .object({
    nodes: z.array(nodeName).min(1).max(Limits.MaxFanOutNodes).describe("the worker nodes to run on; absent: every node whose workers claimed or heartbeat on the queue in the last 30 s (the leader's view, recorded in the log)").optional(),
    quorum: z.number().int().min(1).max(Limits.MaxFanOutNodes).describe('how many nodes must complete; default floor(n/2)+1').optional(),
    quorum_timeout_ms: z.number().int().min(0).max(Limits.MaxDelayMs).describe('nodes not ended this long after the first node completed are skipped; default 10000').optional(),
  })
  .strict();
/** A template's or schedule's name: its aggregate id (partition sys), one subject token. */
export const aggregateName = z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, `must be 1-${Limits.MaxScheduleNameChars} characters of [A-Za-z0-9_-]`);

export const backoffSchema = z
  .object({
    base_ms: z.number().int().min(0),
    max_ms: z.number().int().min(0),
    jitter: z.number().min(0).max(1),
  })
  .strict();

/** A string of at most `max` bytes of UTF-8 (z.string().max counts UTF-16 units, not bytes). */
const boundedString = (max: number) => z.string().refine((v) => Buffer.byteLength(v) <= max, { message: `must be at most ${max} bytes` });
/** JSON data of at most `max` bytes once encoded. */
const boundedJson = (max: number) => jsonValue.refine((v) => jsonBytesAtMost(v ?? null, max), { message: `must be at most ${max} bytes of JSON` });

/** A job's fields, shared by a single submit (with its command id) and a batch's items. */
const jobSpecShape = {
  queue: queueName,
  key: z
    .union([z.string().min(1), jsonObject])
    .refine((k) => jsonBytesAtMost(k, Limits.MaxKeyBytes), { message: `must be at most ${Limits.MaxKeyBytes} bytes of JSON` })
    .optional(),
  params: jsonObject
    .refine((p) => jsonBytesAtMost(p, Limits.MaxParamsBytes), {
      message: `must be at most ${Limits.MaxParamsBytes} bytes of JSON`,
    })
    .optional(),
  priority: z.number().int().min(Priority.Min).max(Priority.Max).optional(),
  delay_ms: z.number().int().min(0).max(Limits.MaxDelayMs).optional(),
  run_at: z.iso.datetime({ offset: true }).optional(),
  max_attempts: z.number().int().min(1).max(Limits.MaxAttempts).optional(),
  backoff: backoffSchema.optional(),
  concurrency_key: z.string().min(1).max(200).describe("flow control: the queue's key_concurrency and key_rate hold per key (a tenant id, say)").optional(),
  depends_on: z.array(idToken).min(1).max(Limits.MaxDependencies).describe('job ids (any queue) this job waits for: it runs once all of them succeeded and is skipped when one ends otherwise').optional(),
  fan_out: fanOutSchema.optional(),
  template: aggregateName
    .describe("make the job from this template: the template's params with the submit's merged over them (shallow, by key), its priority, max_attempts and backoff where the submit gives none; the node fills a missing queue with the template's")
    .optional(),
};
const notBothDelays: [(j: { delay_ms?: number | undefined; run_at?: string | undefined }) => boolean, { message: string; path: PropertyKey[] }] = [
  (j) => !(j.delay_ms !== undefined && j.run_at !== undefined),
  { message: 'give delay_ms or run_at, not both', path: ['delay_ms'] },
];

export const jobSpecSchema = z
  .object(jobSpecShape)
  .strict()
  .refine(...notBothDelays);
export type JobSpec = z.infer<typeof jobSpecSchema>;

/**
 * One job: the same fields, checked by the same strict object as a batch's items (an earlier
 * loose object plus a spread lost an own `__proto__` key on the way).
 */
export const submitOneSchema = z
  .object({ id: commandId.optional(), ...jobSpecShape })
  .strict()
  .refine(...notBothDelays)
  .transform(({ id, ...job }) => ({ id, jobs: [job as JobSpec], batch: false as const }));

export const submitBatchSchema = z
  .object({
    id: commandId.optional(),
    jobs: z.array(jobSpecSchema).min(1).max(Limits.MaxBatchJobs),
  })
  .strict();

export const cancelSchema = z.object({ id: commandId.optional(), job_id: idToken, reason: z.string().max(1000).optional() }).strict();
export const getSchema = z.object({ job_id: idToken }).strict();
export const listSchema = z
  .object({
    queue: queueName,
    status: z
      .enum([...JOB_STATUSES, 'delayed'])
      .describe('a job state, or delayed: queued with its run_at not yet come by the node clock (queued includes those)')
      .optional(),
    limit: z.number().int().min(1).max(Limits.MaxListLimit).optional(),
    cursor: z.string().regex(/^\d+$/, 'must be a cursor returned by list').optional(),
  })
  .strict();
export const progressSchema = z.object({ queue: queueName.optional() }).strict();

export type CancelCommand = z.infer<typeof cancelSchema>;
export type GetCommand = z.infer<typeof getSchema>;
export type ListCommand = z.infer<typeof listSchema>;
export type ProgressCommand = z.infer<typeof progressSchema>;

/** Commands by subject suffix, for the service and for the generated JSON Schemas. */
export const commandSchemas = {
  cancel: cancelSchema,
  get: getSchema,
  list: listSchema,
  progress: progressSchema,
} as const;

// Worker protocol: docket.work.<queue>.<verb>
export const claimSchema = z
  .object({
    worker: z.string().min(1).max(200),
    max: z.number().int().min(1).max(Limits.MaxClaimJobs).optional(),
    wait_ms: z.number().int().min(0).max(Limits.MaxClaimWaitMs).optional(),
    lease_ms: z.number().int().min(Limits.MinLeaseMs).max(Limits.MaxLeaseMs).optional(),
    host: z.string().max(200).optional(),
    pid: z.number().int().min(0).optional(),
    version: z.string().max(200).optional(),
    user: z.string().max(200).describe("the worker's user, recorded on each run (seed 000's error record)").optional(),
    connection_id: z.number().int().min(0).describe("the worker's NATS client id on its server, recorded on each run").optional(),
    node: nodeName.describe("the worker's node (fan-out jobs): the claim also takes the queued job nodes of this node, and the leader counts the node as live on the queue").optional(),
    max_priority: z
      .number()
      .int()
      .min(Priority.Min)
      .max(Priority.Max)
      .describe('only jobs at this priority or more urgent (docket populate --priority); answered at once, with none, when the next job is less urgent')
      .optional(),
    request_id: idToken
      .describe("the claim's own id, kept when it is sent again: a resend (same worker, same request_id) is answered with the first answer's runs that still hold their jobs, and claims nothing new")
      .optional(),
  })
  .strict();
export const heartbeatSchema = z
  .object({
    worker: z.string().max(200).optional(),
    node: nodeName.describe("the worker's node: keeps it live on the queue for fan-out jobs").optional(),
    run_ids: z.array(idToken).max(Limits.MaxClaimJobs * 10),
    /** Latest progress per run id, as the handler reported it (logged by the leader at debug, not stored). */
    progress: z.record(idToken, boundedJson(Limits.MaxProgressBytes)).optional(),
  })
  .strict();
/** How long the handler ran (ms), as the worker measured it: seed 000's `duration`, recorded on the run. */
const durationMs = z.number().int().min(0).optional();
/**
 * A claim carried by a complete or fail (`next`): the worker's freed slot refilled in the same
 * round trip, decided with the completion (one commit). Without `wait_ms` (or 0) it never waits:
 * an empty answer sends the worker back to its long-poll claim. With `wait_ms`, a claim that
 * found nothing is parked as a long poll once the completion is committed, and the reply waits
 * for it: a worker with nothing else to do has its next claim waiting at the queue before anyone
 * sees the completion (README "Workers").
 */
export const nextClaimSchema = claimSchema;
export const completeSchema = z
  .object({ run_id: idToken, job_id: idToken, result: boundedJson(Limits.MaxResultBytes).optional(), exit_code: z.number().int().optional(), duration_ms: durationMs, next: nextClaimSchema.optional() })
  .strict();
/** Many completions in one request (DESIGN: the worker protocol batches); each is answered on its own. */
export const completeBatchSchema = z
  .object({ runs: z.array(completeSchema.omit({ next: true }).strict()).min(1).max(Limits.MaxClaimJobs), next: nextClaimSchema.optional() })
  .strict();
export const jobErrorSchema = z
  .object({ message: boundedString(Limits.MaxErrorMessageBytes), stack: boundedString(Limits.MaxErrorStackBytes).optional(), retryable: z.boolean().optional() })
  .strict();
export const failSchema = z
  .object({ run_id: idToken, job_id: idToken, error: jobErrorSchema, exit_code: z.number().int().optional(), duration_ms: durationMs, next: nextClaimSchema.optional() })
  .strict();
export const failBatchSchema = z
  .object({ runs: z.array(failSchema.omit({ next: true }).strict()).min(1).max(Limits.MaxClaimJobs), next: nextClaimSchema.optional() })
  .strict();
export const retrySchema = z.object({ id: commandId.optional(), job_id: idToken }).strict();
/** Makes a delayed job due now. */
export const promoteSchema = z.object({ id: commandId.optional(), job_id: idToken }).strict();
export const moveSchema = z
  .object({
    id: commandId.optional(),
    job_id: idToken,
    priority: z.number().int().min(Priority.Min).max(Priority.Max).optional(),
    before: idToken.optional(),
    after: idToken.optional(),
  })
  .strict()
  .refine((m) => !(m.before !== undefined && m.after !== undefined), { message: 'give before or after, not both', path: ['before'] })
  .refine((m) => m.before !== undefined || m.after !== undefined || m.priority !== undefined, { message: 'give priority, before or after', path: ['priority'] });

export type ClaimCommand = z.infer<typeof claimSchema>;
export type NextClaimCommand = z.infer<typeof nextClaimSchema>;

/** One job of a claim's reply: what a worker needs to run it, and its run id (the fencing token). */
export interface ClaimedJob {
  readonly job_id: string;
  readonly run_id: string;
  readonly queue: string;
  readonly key: unknown;
  readonly params: JsonObject;
  readonly attempt: number;
  readonly max_attempts: number;
  readonly lease_ms: number;
  /**
   * The position of the run's job.claimed event: strictly increasing within a queue, so a system
   * the handler writes to can refuse a write from an older run of the same job.
   */
  readonly fencing_token: number;
  /**
   * Set when this is a fan-out job's entry for the claiming worker's node: `job_id` above is then
   * the job node's id (complete and fail name it as for any run), this names the job.
   */
  readonly fan_out?: ClaimedFanOut;
}

/** What a handler of a fan-out job's node sees: the job, this node, all the job's nodes and its quorum. */
export interface ClaimedFanOut {
  readonly job_id: string;
  readonly node: string;
  readonly nodes: readonly string[];
  readonly quorum: number;
}
export type HeartbeatCommand = z.infer<typeof heartbeatSchema>;
export type CompleteCommand = z.infer<typeof completeSchema>;
export type FailCommand = z.infer<typeof failSchema>;
export type CompleteItem = Omit<CompleteCommand, 'next'>;
export type FailItem = Omit<FailCommand, 'next'>;
export type RetryCommand = z.infer<typeof retrySchema>;
export type PromoteCommand = z.infer<typeof promoteSchema>;
export type MoveCommand = z.infer<typeof moveSchema>;

// Bulk actions on a queue (src/commands/bulk-commands.ts): one command, one event per affected job.
/** Asks for the count (and ids) of the jobs the command would touch, appending nothing. */
const dryRun = z.boolean().describe('true: answer the count of the jobs it would touch and append nothing').optional();
export const retryAllSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    since: z.iso.datetime({ offset: true }).describe('only jobs that failed at or after this time').optional(),
    dry_run: dryRun,
  })
  .strict();
export const cancelAllSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    status: z.enum(['queued', 'waiting', 'delayed']).describe('queued: every queued job (the delayed ones too); delayed: queued with its run_at not yet come'),
    reason: z.string().max(1000).optional(),
    dry_run: dryRun,
  })
  .strict();
export const cleanSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    older_than_ms: z.number().int().min(0).describe('jobs that ended at least this long ago (by the node clock)'),
    status: z.enum(TERMINAL_STATUS_NAMES),
    dry_run: dryRun,
  })
  .strict();
export type RetryAllCommand = z.infer<typeof retryAllSchema>;
export type CancelAllCommand = z.infer<typeof cancelAllSchema>;
export type CleanCommand = z.infer<typeof cleanSchema>;
