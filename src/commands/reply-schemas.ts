/**
 * Documentation schemas of the replies of `docket.cmd.<verb>` and `docket.work.<queue>.<verb>`
 * (README "Public contract": Commands, Workers): `{ok: true, ...}` as each verb answers, or the
 * error reply `{ok: false, error: {code, message, details?}}`. zod validators, from which
 * `npm run schemas` writes JSON Schemas (draft 2020-12) to schemas/ as `reply.<verb>.json`
 * (each one the verb's answer or an error) and `reply.error.json`.
 *
 * The node does not validate its replies with these; test/commands/reply-schemas.props.test.ts
 * checks them against what the node's query and error paths answer. Objects are open: a reply
 * may gain fields in a later version, and a client should ignore the ones it does not know.
 */
import { z } from 'zod';
import { JOB_STATUSES, Priority, SHOWN_JOB_STATUSES } from '../../machines/index.js';
import { ErrorCodes } from '../errors.js';
import type { JsonSchema } from './json-schemas.js';

const DRAFT = 'https://json-schema.org/draft/2020-12/schema';
const OPEN_NOTE = 'Objects are open: docket may add fields to a reply in a later version; ignore the ones you do not know.';

const status = z.enum(JOB_STATUSES).describe("The job's state after the command.");
const jobId = z.string().min(1);
const json = z.unknown();

/** The error of a refused request (src/errors.ts). */
export const errorBodySchema = z.looseObject({
  code: z.enum(Object.values(ErrorCodes)).describe('invalid_request (bad input, nothing appended), not_found, invalid_transition (the job cannot do that now), conflict (a reused command id with another body, or a lost race), stale_run (the run no longer holds its job), paused, unavailable (retry; a resend with the same command id is safe).'),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).describe('What the error names (job_id, issues, max_payload, ...).').optional(),
});

export const errorReplySchema = z.looseObject({ ok: z.literal(false), error: errorBodySchema }).describe('A refused request.');

function ok<S extends z.core.$ZodLooseShape>(shape: S) {
  return z.looseObject({ ok: z.literal(true), ...shape });
}

/** A job as list and get give it (src/commands/queries.ts `toSummary`). */
export const jobSummarySchema = z.looseObject({
  job_id: jobId,
  queue: z.string(),
  status,
  key: json.describe('The job key: a string, an object, or null.'),
  priority: z.int().min(Priority.Min).max(Priority.Max),
  position: z.number().nullable(),
  run_at: z.string(),
  attempt: z.int(),
  max_attempts: z.int(),
  retry_of: z.string().nullable(),
  created_at: z.string(),
  finished_at: z.string().nullable(),
  end_reason: z.string().nullable(),
  error_message: z.string().describe("A failed job's error message: its first 2,047 characters (seed 000's error_message). Absent for other states.").optional(),
  seq: z.int().describe('The position of its job.submitted: commit sequence ...'),
  index: z.int().describe('... and index in the commit.'),
});

/** One job of a claim's reply. */
export const claimedJobSchema = z.looseObject({
  job_id: jobId,
  run_id: z.string().min(1).describe("The run's id: name it in heartbeat, complete and fail."),
  queue: z.string(),
  key: json,
  params: z.record(z.string(), z.unknown()),
  attempt: z.int(),
  max_attempts: z.int(),
  lease_ms: z.int(),
  fencing_token: z.int().describe('The position of the run\'s job.claimed (seq * 65536 + index): strictly increasing within a queue.'),
});

const submitItem = { job_id: jobId, status, created: z.boolean().describe('false: the key already had a live job, which is returned; nothing was appended.') };
const nextJobs = { jobs: z.array(claimedJobSchema).describe('The jobs claimed by `next`, when the request carried one.').optional() };

/** A bulk action's answer (src/commands/bulk-commands.ts BulkReply). */
function bulkReply(ids: string) {
  return {
    count: z.int().min(0).describe('Jobs acted on (with dry_run: that would be). A resend with the same command id answers the first send\'s.'),
    job_ids: z.array(jobId).describe(`${ids} Cut to fit the max payload (then truncated is true).`),
    truncated: z.literal(true).describe('job_ids holds fewer ids than count.').optional(),
    dry_run: z.literal(true).describe('Nothing was appended.').optional(),
    failed: z.int().min(1).describe('Events whose commit failed (the others are stored): send the command again, with a new id, to act on those jobs.').optional(),
    error: errorBodySchema.describe('Why those commits failed.').optional(),
  };
}

/** The answer of each verb when it succeeds (before the error alternative is added). */
export const replyOkSchemas = {
  submit: z.union([
    ok(submitItem).describe('One job submitted.'),
    ok({
      jobs: z.array(z.union([z.looseObject({ ok: z.literal(true), ...submitItem }), z.looseObject({ ok: z.literal(false), error: errorBodySchema })])).describe('A batch: one answer per job, in order.'),
    }).describe('A batch submitted.'),
  ]),
  cancel: ok({ job_id: jobId, status }),
  get: ok({
    job: jobSummarySchema.extend({
      status: z.enum(SHOWN_JOB_STATUSES).describe('Its state; removed: it left every view (job.removed), only get shows it.'),
      params: z.record(z.string(), z.unknown()),
      backoff: z.record(z.string(), z.unknown()),
    }),
    run: z
      .looseObject({
        status: z.string().describe('running, succeeded or failed (its run machine state).'),
        run_id: z.string().nullable(),
        worker: z.string().nullable(),
        host: z.string().nullable(),
        pid: z.int().nullable(),
        version: z.string().nullable(),
        user: z.string().nullable().describe("The worker's user (seed 000's error record); null when the worker did not say."),
        connection_id: z.int().nullable().describe("The worker's NATS client id on its server; null when the worker did not say."),
        lease_ms: z.int().nullable(),
        started_at: z.string().nullable(),
        finished_at: z.string().nullable(),
        result: json.describe('What the run returned (null until it succeeded).'),
        error: z.looseObject({ message: z.string(), stack: z.string().optional(), retryable: z.boolean().optional() }).nullable(),
        failure_reason: z.string().nullable(),
        exit_code: z.int().nullable(),
        duration_ms: z.int().nullable().describe('How long the handler ran (ms), as the worker measured it; null when it did not say.'),
        artifacts: z.array(z.looseObject({ name: z.string(), uri: z.string().optional(), meta: z.record(z.string(), z.unknown()).optional() })),
      })
      .nullable()
      .describe('The current or last run, or null when the job never ran.'),
    history: z.array(z.looseObject({ seq: z.int(), index: z.int(), type: z.string(), time: z.string(), id: z.string() })).describe("The job's events, oldest first."),
    truncated: z.literal(true).describe('The history was cut to fit the max payload.').optional(),
    evicted: z.literal(true).describe("The job had finished and its body had left the node's memory after the retention period (DOCKET_FINISHED_RETENTION_MS): this answer was read back from the log.").optional(),
    held: z.looseObject({ reason: z.string(), detail: z.string(), until: z.string().optional() }).describe('What holds this queued, due job now (flow control: pause, reservation, a limit of the queue or of its concurrency_key).').optional(),
  }),
  list: ok({
    jobs: z.array(jobSummarySchema).describe('In submit order.'),
    next_cursor: z.string().nullable().describe('Send as `cursor` for the next page; null at the end.'),
  }),
  progress: ok({
    queues: z.array(
      z.looseObject({
        queue: z.string(),
        counts: z.record(z.string(), z.int().min(0)).describe('Jobs per state.'),
        pending: z.int().min(0),
        delayed: z.int().min(0).optional(),
        reserved: z.int().min(0),
        success: z.int().min(0),
        error: z.int().min(0),
        ignore: z.int().min(0),
        cancelled: z.int().min(0).describe('Cancelled jobs (DataJoint has no such state).').optional(),
        total: z.int().min(0),
        flow: z
          .looseObject({
            status: z.enum(['active', 'paused']),
            held: z.looseObject({ reason: z.string(), detail: z.string(), until: z.string().optional() }).nullable().describe('What holds the whole queue now (pause, reservation, concurrency, rate), if anything.'),
            waiting_by_reason: z.record(z.string(), z.int().min(0)).describe('Ready jobs held back, by what holds them.'),
            waiting_truncated: z.literal(true).optional(),
          })
          .describe('Flow control (docket.cmd.progress on a node).')
          .optional(),
        removed: z.int().min(1).describe('Jobs removed from the views (job.removed): in no count and not in total. Absent when none.').optional(),
      }),
    ),
    truncated: z.literal(true).describe('Cut to fit the max payload.').optional(),
  }),
  retry: ok({ job_id: jobId, status, created: z.boolean(), retry_of: jobId }),
  move: ok({ job_id: jobId, status, priority: z.int().min(Priority.Min).max(Priority.Max), position: z.number().nullable() }),
  promote: ok({ job_id: jobId, status, run_at: z.string() }),
  retry_all: ok(bulkReply('The retries created (new jobs), in the order created.')),
  cancel_all: ok(bulkReply('The jobs cancelled, in submit order.')),
  clean: ok(bulkReply('The jobs removed, in submit order.')),
  claim: ok({ jobs: z.array(claimedJobSchema).describe('In queue order; empty when none was ready.') }),
  heartbeat: ok({ lost: z.array(z.string()).describe('The run ids that no longer hold their job: stop them.') }),
  complete: z.union([
    ok({ job_id: jobId, status, ...nextJobs }).describe('One run completed.'),
    ok({
      runs: z.array(z.union([z.looseObject({ ok: z.literal(true), job_id: jobId, status }), z.looseObject({ ok: z.literal(false), job_id: jobId, error: errorBodySchema })])).describe('A batch: one answer per run, in order.'),
      ...nextJobs,
    }).describe('A batch of runs.'),
  ]),
  fail: z.union([
    ok({ job_id: jobId, status, ...nextJobs }).describe('One run failed.'),
    ok({
      runs: z.array(z.union([z.looseObject({ ok: z.literal(true), job_id: jobId, status }), z.looseObject({ ok: z.literal(false), job_id: jobId, error: errorBodySchema })])).describe('A batch: one answer per run, in order.'),
      ...nextJobs,
    }).describe('A batch of runs.'),
  ]),
} as const;

export type ReplyVerb = keyof typeof replyOkSchemas;

const SUBJECTS: Record<ReplyVerb, string> = {
  submit: 'docket.cmd.submit',
  cancel: 'docket.cmd.cancel',
  get: 'docket.cmd.get',
  list: 'docket.cmd.list',
  progress: 'docket.cmd.progress',
  retry: 'docket.cmd.retry',
  move: 'docket.cmd.move',
  promote: 'docket.cmd.promote',
  retry_all: 'docket.cmd.retry_all',
  cancel_all: 'docket.cmd.cancel_all',
  clean: 'docket.cmd.clean',
  claim: 'docket.work.<queue>.claim',
  heartbeat: 'docket.work.<queue>.heartbeat',
  complete: 'docket.work.<queue>.complete',
  fail: 'docket.work.<queue>.fail',
};

/** What a verb's request is answered with: its answer, or an error. */
export const replySchemas = Object.fromEntries(
  Object.entries(replyOkSchemas).map(([verb, schema]) => [verb, z.union([schema, errorReplySchema])]),
) as { [V in ReplyVerb]: z.ZodUnion<[(typeof replyOkSchemas)[V], typeof errorReplySchema]> };

function generate(title: string, description: string, schema: z.ZodType): JsonSchema {
  const json = z.toJSONSchema(schema, { io: 'input', target: 'draft-2020-12' }) as JsonSchema;
  delete json['$schema'];
  return { $schema: DRAFT, title, description: `${description} ${OPEN_NOTE}`, ...json };
}

/** The reply schemas by file name (without .json): `reply.<verb>` and `reply.error`. */
export function replyJsonSchemas(): Record<string, JsonSchema> {
  return {
    'reply.error': generate('docket error reply', 'The reply of any refused request: {ok:false, error:{code, message, details?}}.', errorReplySchema),
    ...Object.fromEntries(
      (Object.keys(replyOkSchemas) as ReplyVerb[]).map((verb) => [
        `reply.${verb}`,
        generate(`${SUBJECTS[verb]} reply`, `The reply of ${SUBJECTS[verb]}: {ok:true, ...} as below, or the error reply {ok:false, error:{code, message, details?}}.`, replySchemas[verb]),
      ]),
    ),
  };
}
