/**
 * JSON Schemas (draft 2020-12) of every request docket takes, generated from the zod validators
 * in schemas.ts with zod's `z.toJSONSchema`, for clients in other languages. `npm run schemas`
 * writes them to schemas/ (shipped in the package); test/commands/json-schemas.props.test.ts
 * checks that they are current and that whatever the node accepts, they accept.
 *
 * What JSON Schema cannot say is said in a `description` and left to the node: the byte limits
 * of params and keys (measured on the JSON text) and the nesting depth of JSON values. What it
 * can say beyond zod's output is added here: the cross-field rules of a job spec and of move.
 * Replies and events: reply-schemas.ts and src/nats/event-schemas.ts (`shippedSchemas` has all).
 */
import { z } from 'zod';
import { eventJsonSchemas } from '../nats/event-schemas.js';
import { Limits } from './limits.js';
import { replyJsonSchemas } from './reply-schemas.js';
import { commandSourceSchema, deleteSchema, fileSourceSchema, ignoreSchema, inlineSourceSchema, jobSetPutSchema, jobSetShowSchema, refreshSchema, sqlSourceSchema } from './jobset-schemas.js';
import {
  scheduleBackfillSchema,
  scheduleDeleteSchema,
  scheduleDisableSchema,
  scheduleEnableSchema,
  schedulePreviewSchema,
  scheduleGetSchema,
  scheduleListSchema,
  templateGetSchema,
  templateListSchema,
  schedulePutSchema,
  scheduleTriggerSchema,
  templateArchiveSchema,
  templatePutSchema,
} from './schedule-schemas.js';
import {
  cancelSchema,
  claimSchema,
  commandId,
  completeSchema,
  failSchema,
  getSchema,
  heartbeatSchema,
  jobSpecSchema,
  jsonObject,
  jsonValue,
  listSchema,
  moveSchema,
  promoteSchema,
  completeBatchSchema,
  failBatchSchema,
  progressSchema,
  retrySchema,
  submitBatchSchema,
  retryAllSchema,
  cancelAllSchema,
  cleanSchema,
} from './schemas.js';
import { groupCancelSchema, groupCreateSchema, groupGetSchema, groupListSchema } from './group-schemas.js';
import { pauseSchema, queueSetSchema, queueShowSchema, releaseSchema, renewSchema, reservationsSchema, reserveSchema, resumeSchema } from './queue-schemas.js';

export type JsonSchema = { [key: string]: unknown };

const DRAFT = 'https://json-schema.org/draft/2020-12/schema';
const DEPTH_NOTE = `nested at most ${Limits.MaxJsonDepth} deep (a limit the node checks; JSON Schema does not express it)`;

/** The check function behind a custom zod type: refinements clone the type, and keep it. */
function customCheck(schema: z.core.$ZodType): unknown {
  const def = schema._zod.def as { type: string; fn?: unknown };
  return def.type === 'custom' ? def.fn : undefined;
}

function generate(schema: z.ZodType): JsonSchema {
  const json = z.toJSONSchema(schema, {
    io: 'input',
    // The custom JSON types are described by the override below, never left as they come.
    unrepresentable: 'any',
    override: (ctx) => {
      const check = customCheck(ctx.zodSchema);
      if (check === undefined) return;
      if (check === customCheck(jsonObject)) Object.assign(ctx.jsonSchema, { type: 'object', description: `A JSON object ${DEPTH_NOTE}.` });
      else if (check === customCheck(jsonValue)) Object.assign(ctx.jsonSchema, { description: `Any JSON value ${DEPTH_NOTE}.` });
      else throw new Error(`a custom zod type the JSON Schema generator does not know, at ${ctx.path.join('.')}`);
    },
  }) as JsonSchema;
  delete json['$schema'];
  return json;
}

function properties(schema: JsonSchema): Record<string, JsonSchema> {
  return schema['properties'] as Record<string, JsonSchema>;
}

/** A byte limit measured on the JSON text, which JSON Schema has no keyword for. */
function byteLimitNote(schema: JsonSchema, what: string, bytes: number): void {
  const before = typeof schema['description'] === 'string' ? `${schema['description']} ` : '';
  schema['description'] = `${before}${what} at most ${bytes} bytes as JSON text (UTF-8): checked by the node, not expressed by this schema.`;
}

/** A job spec: zod's output plus the byte limits said and delay_ms/run_at made exclusive. */
function jobSpec(): JsonSchema {
  const json = generate(jobSpecSchema);
  const props = properties(json);
  byteLimitNote(props['key']!, 'The key is', Limits.MaxKeyBytes);
  byteLimitNote(props['params']!, 'The params are', Limits.MaxParamsBytes);
  return {
    ...json,
    description: 'One job. Give delay_ms or run_at, not both.',
    not: { required: ['delay_ms', 'run_at'] },
  };
}

/**
 * Said on every schema: string lengths are counted differently. A string of characters outside
 * the BMP (emoji) may pass maxLength here and still be refused by the node; never the reverse.
 */
const LENGTH_NOTE = 'String lengths: the node counts UTF-16 code units, JSON Schema counts characters, so a string with characters outside the Basic Multilingual Plane can pass a maxLength here and be refused by the node.';

function request(title: string, description: string, body: JsonSchema): JsonSchema {
  const { description: bodyDescription, ...rest } = body;
  const text = [description, typeof bodyDescription === 'string' ? bodyDescription : undefined, LENGTH_NOTE].filter((d) => d !== undefined).join(' ');
  return { $schema: DRAFT, title, description: text, ...rest };
}

function submit(): JsonSchema {
  const batch = generate(submitBatchSchema);
  (properties(batch)['jobs'] as JsonSchema)['items'] = jobSpec();
  // One job is a job spec with the command id beside its fields (the spec is closed, so the id
  // goes into its properties rather than through a $ref, which additionalProperties would not see).
  const one = jobSpec();
  one['properties'] = { ...properties(one), id: generate(commandId) };
  return request(
    'docket.cmd.submit request',
    `One job (a job spec with an optional command id \`id\`), or a batch {id?, jobs: [job spec, ...]} of up to ${Limits.MaxBatchJobs} jobs. A body with a \`jobs\` field is a batch.`,
    { anyOf: [one, batch] },
  );
}

function move(): JsonSchema {
  return {
    ...generate(moveSchema),
    not: { required: ['before', 'after'] },
    anyOf: [{ required: ['priority'] }, { required: ['before'] }, { required: ['after'] }],
  };
}

/**
 * zod writes a union of primitive types as `type: [...]`, which strict validators (Ajv's
 * strictTypes) refuse; the same union as `anyOf`, everywhere in `schema`.
 */
function typeUnionsAsAnyOf(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(typeUnionsAsAnyOf);
  if (schema === null || typeof schema !== 'object') return schema;
  const out: JsonSchema = {};
  for (const [k, v] of Object.entries(schema)) out[k] = typeUnionsAsAnyOf(v);
  if (Array.isArray(out['type'])) {
    const { type, ...rest } = out;
    return { ...rest, anyOf: (type as string[]).map((t) => ({ type: t })) };
  }
  return out;
}

/** A key source or target: one of four forms (the node picks the form by its naming field). */
function keySource(): JsonSchema {
  const sql = generate(sqlSourceSchema);
  const url = properties(sql)['url']!;
  url['description'] = 'postgres://, postgresql://, mysql:// or mariadb://, holding no password (give password_env): checked by the node.';
  return {
    description: 'A key source: {url, sql, password_env?, timeout_ms?} (PostgreSQL or MariaDB/MySQL), {command: [argv...], timeout_ms?} (stdout is JSON lines), {file: path} (JSON lines) or {keys: [...]}.',
    anyOf: [sql, generate(commandSourceSchema), generate(fileSourceSchema), typeUnionsAsAnyOf(generate(inlineSourceSchema))],
  };
}

/** jobset.put: zod's output with the key source's four forms put in (its validator picks one by hand). */
function jobSetPut(): JsonSchema {
  const json = generate(jobSetPutSchema);
  const props = properties(json);
  props['key_source'] = keySource();
  props['target'] = keySource();
  const required = new Set([...((json['required'] as string[] | undefined) ?? []), 'queue', 'key_source']);
  return { ...json, required: [...required] };
}

/** A schedule put: exactly one of template and job; the params' byte limit said. */
function schedulePut(): JsonSchema {
  const json = generate(schedulePutSchema);
  byteLimitNote(properties(json)['params']!, 'The params are', Limits.MaxParamsBytes);
  return {
    ...json,
    description: 'Give template or job, exactly one. end_at must be after start_at; cron and timezone are checked by the node (croner, the IANA database).',
    oneOf: [{ required: ['template'] }, { required: ['job'] }],
  };
}

/** Every schema by file name (without .json): `cmd.<verb>` and `work.<verb>` by subject, and the job spec. */
export function jsonSchemas(): Record<string, JsonSchema> {
  return {
    'job-spec': request('docket job spec', 'One job as submitted (docket.cmd.submit, alone or in a batch).', jobSpec()),
    'cmd.submit': submit(),
    'cmd.cancel': request('docket.cmd.cancel request', 'Cancel a waiting, queued or running job.', generate(cancelSchema)),
    'cmd.get': request('docket.cmd.get request', 'One job with its run and history.', generate(getSchema)),
    'cmd.list': request('docket.cmd.list request', "A page of a queue's jobs in submit order.", generate(listSchema)),
    'cmd.progress': request('docket.cmd.progress request', 'Counts per queue (one queue, or all).', generate(progressSchema)),
    'cmd.retry': request('docket.cmd.retry request', 'Retry a failed or cancelled job by hand.', generate(retrySchema)),
    'cmd.move': request('docket.cmd.move request', 'Reorder a queued job: give priority, before or after (not both before and after).', move()),
    'cmd.promote': request('docket.cmd.promote request', 'Make a delayed job due now (its place in the queue order kept).', generate(promoteSchema)),
    'cmd.pause': request('docket.cmd.pause request', 'Pause a queue: it takes submits and hands out nothing until resumed.', generate(pauseSchema)),
    'cmd.resume': request('docket.cmd.resume request', 'Resume a paused queue.', generate(resumeSchema)),
    'cmd.queue.set': request('docket.cmd.queue.set request', "Change a queue's flow-control settings: give at least one; null clears it.", {
      ...generate(queueSetSchema),
      anyOf: [{ required: ['concurrency'] }, { required: ['rate'] }, { required: ['key_concurrency'] }, { required: ['key_rate'] }],
    }),
    'cmd.queue.show': request('docket.cmd.queue.show request', "A queue's state, settings, reservation and what holds its waiting jobs.", generate(queueShowSchema)),
    'cmd.reserve': request('docket.cmd.reserve request', "Take the queue's one reservation (direct execution), optionally with a job created and claimed under it. The job's queue must be the reserved queue (checked by the node).", generate(reserveSchema)),
    'cmd.release': request('docket.cmd.release request', 'End a reservation.', generate(releaseSchema)),
    'cmd.renew': request('docket.cmd.renew request', "Push a reservation's expiry to ttl_ms from now.", generate(renewSchema)),
    'cmd.group.create': request('docket.cmd.group.create request', 'Create a group: its members (submit bodies of any queues, without key or depends_on) run one after another (sequential) or together (parallel).', generate(groupCreateSchema)),
    'cmd.group.get': request('docket.cmd.group.get request', 'A group with its members and its derived status.', generate(groupGetSchema)),
    'cmd.group.list': request('docket.cmd.group.list request', 'Every group with its status.', generate(groupListSchema)),
    'cmd.group.cancel': request('docket.cmd.group.cancel request', "Cancel a group's live members.", generate(groupCancelSchema)),
    'cmd.reservations': request('docket.cmd.reservations request', 'The active reservations (of one queue, or all).', generate(reservationsSchema)),
    'cmd.retry_all': request('docket.cmd.retry_all request', 'Retry every failed job of the queue whose retry chain has no retry yet (failed at or after `since`), one event per job; dry_run answers the count only.', generate(retryAllSchema)),
    'cmd.cancel_all': request('docket.cmd.cancel_all request', 'Cancel every queued, waiting or delayed job of the queue, one event per job; dry_run answers the count only.', generate(cancelAllSchema)),
    'cmd.clean': request('docket.cmd.clean request', 'Remove from every view (job.removed, reason cleaned) the jobs of one terminal status that ended at least older_than_ms ago; the log keeps them. dry_run answers the count only.', generate(cleanSchema)),
    'cmd.jobset.put': request('docket.cmd.jobset.put request', "Make a queue a job set (DataJoint's jobs table): its key source, target and settings.", jobSetPut()),
    'cmd.jobset.show': request('docket.cmd.jobset.show request', "A job set's definition and progress in DataJoint's terms, with remaining = source keys not in the target.", generate(jobSetShowSchema)),
    'cmd.ignore': request('docket.cmd.ignore request', "Ignore a key of a job set (seed 000's jobs.ignore): its pending job, or a new job ignored as it is submitted; never handed out, never removed as stale.", typeUnionsAsAnyOf(generate(ignoreSchema)) as JsonSchema),
    'cmd.delete': request('docket.cmd.delete request', "Remove a job set's jobs matching key, status and restrict (AND) from the views (job.removed, reason deleted), running ones excepted: the next refresh adds their keys again.", {
      ...(typeUnionsAsAnyOf(generate(deleteSchema)) as JsonSchema),
      anyOf: [{ required: ['key'] }, { required: ['status'] }, { required: ['restrict'] }],
    }),
    'cmd.refresh': request('docket.cmd.refresh request', "Refresh a job set (seed 000's jobs.refresh): add missing keys, re-pend, remove stale and orphaned jobs.", typeUnionsAsAnyOf(generate(refreshSchema)) as JsonSchema),
    'cmd.template.put': request('docket.cmd.template.put request', 'Create or revise a named template (each put is the next revision).', generate(templatePutSchema)),
    'cmd.template.archive': request('docket.cmd.template.archive request', 'Archive a template: it refuses new jobs.', generate(templateArchiveSchema)),
    'cmd.schedule.put': request('docket.cmd.schedule.put request', 'Create or revise a cron schedule (each put is the next revision).', schedulePut()),
    'cmd.schedule.enable': request('docket.cmd.schedule.enable request', 'Enable a disabled schedule.', generate(scheduleEnableSchema)),
    'cmd.schedule.disable': request('docket.cmd.schedule.disable request', 'Disable a schedule, with a note.', generate(scheduleDisableSchema)),
    'cmd.schedule.delete': request('docket.cmd.schedule.delete request', 'Delete a schedule.', generate(scheduleDeleteSchema)),
    'cmd.schedule.trigger': request('docket.cmd.schedule.trigger request', 'Fire a schedule now, outside its cron.', generate(scheduleTriggerSchema)),
    'cmd.schedule.backfill': request(
      'docket.cmd.schedule.backfill request',
      `Fire every tick of a past range [from, to] under the overlap policy: to not before from, at most ${Limits.MaxBackfillRangeMs} ms and ${Limits.MaxBackfillTicks} ticks (checked by the node).`,
      generate(scheduleBackfillSchema),
    ),
    'cmd.schedule.preview': request('docket.cmd.schedule.preview request', 'The next fire times of a cron in a time zone, as ISO-8601 UTC.', generate(schedulePreviewSchema)),
    'cmd.template.get': request('docket.cmd.template.get request', 'A template as this node has folded it.', generate(templateGetSchema)),
    'cmd.template.list': request('docket.cmd.template.list request', 'Every template.', generate(templateListSchema)),
    'cmd.schedule.get': request('docket.cmd.schedule.get request', 'A schedule as this node has folded it, with its next fire times.', generate(scheduleGetSchema)),
    'cmd.schedule.list': request('docket.cmd.schedule.list request', 'The schedules (deleted ones only when asked).', generate(scheduleListSchema)),
    'work.claim': request('docket.work.<queue>.claim request', 'Claim up to `max` jobs of the queue.', generate(claimSchema)),
    'work.heartbeat': request('docket.work.<queue>.heartbeat request', 'Extend the leases of these runs; the reply names the runs that lost their job.', generate(heartbeatSchema)),
    'work.complete': request('docket.work.<queue>.complete request', 'A run succeeded, or many runs ended at once ({runs: [...]}, each answered on its own).', { anyOf: [generate(completeSchema), generate(completeBatchSchema)] }),
    'work.fail': request('docket.work.<queue>.fail request', 'A run failed, or many runs failed at once ({runs: [...]}, each answered on its own).', { anyOf: [generate(failSchema), generate(failBatchSchema)] }),
  };
}

/** A schema file's text, as `npm run schemas` writes it and the test compares it. */
export function schemaFileText(schema: JsonSchema): string {
  return `${JSON.stringify(schema, null, 2)}\n`;
}

/**
 * Every schema `npm run schemas` ships, by file name: the requests (above), the replies
 * (reply-schemas.ts) and the commit and events (src/nats/event-schemas.ts).
 */
export function shippedSchemas(): Record<string, JsonSchema> {
  return { ...jsonSchemas(), ...replyJsonSchemas(), ...eventJsonSchemas() };
}
