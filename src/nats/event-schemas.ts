/**
 * Documentation schemas of the log v2 (DESIGN "Streams and subjects"; README "Public contract",
 * Events): the commit stored in DOCKET, the event envelope, the data of each job event, and the
 * live event published on `docket.evt.job.<queue>.<job_id>`. zod validators, from which
 * `npm run schemas` writes JSON Schemas (draft 2020-12) to schemas/ for clients in other languages.
 *
 * Nothing in the node validates with these: it writes events through the machines and reads the
 * log with the hand-written checks of src/nats/codec.ts (`decodeCommit`, `envelopeProblem`) and
 * src/audit/decode.ts (`jobDataProblem`). test/commands/event-schemas.props.test.ts keeps the
 * schemas between the two: every commit and event the node writes is accepted, and whatever the
 * read path refuses is refused. Objects are open (a field added in a later version does not make
 * a consumer refuse the log); the test also checks that no field the node writes is undocumented.
 */
import { z } from 'zod';
import { AGGREGATE_KINDS, aggregateDefinition, CatchupPolicies, COMMIT_VERSION, FireTriggers, MissReasons, OverlapPolicies, FailureReasons, JOB_EVENT_TYPES, POSITION_SPAN, Priority, READ_COMMIT_VERSIONS, RemovalReasons, SubmittedAbsent, type AggregateEvent, type AggregateKind, type JobEventType } from '../../machines/index.js';
import type { JsonSchema } from '../commands/json-schemas.js';
import { Limits } from '../commands/limits.js';
import { ID_TOKEN, QUEUE_NAME } from './subjects.js';

const DRAFT = 'https://json-schema.org/draft/2020-12/schema';
const DEPTH_NOTE = `nested at most ${Limits.MaxJsonDepth} deep (bounded by the command that wrote it; JSON Schema does not express it)`;

const idToken = z.string().regex(ID_TOKEN);
const queueName = z.string().regex(QUEUE_NAME);
/** RFC 3339 with a `T`, seconds and an offset: what `Date.parse` reads (the read path parses times). */
const isoTime = z.iso.datetime({ offset: true });
const jsonObject = (what: string) => z.record(z.string(), z.unknown()).describe(`${what}: a JSON object ${DEPTH_NOTE}.`);
const jsonValue = (what: string) => z.unknown().describe(`${what}: any JSON value ${DEPTH_NOTE}.`);
const byteNote = (what: string, bytes: number) => `${what} at most ${bytes} bytes of JSON text (UTF-8): checked by the command that wrote it, not expressed by this schema.`;

// ---------------------------------------------------------------------------------------------
// Job event data, one per type (machines/job.events.ts)

const backoff = z.looseObject({
  base_ms: z.int().min(0),
  max_ms: z.int().min(0),
  jitter: z.number().min(0).max(1),
});

const jobError = z.looseObject({
  message: z.string().describe(`${byteNote('The message is', Limits.MaxErrorMessageBytes)} A worker's failure stores its first ${Limits.MaxErrorSummaryChars} characters (seed 000's error_message), the whole message in stack when it had none.`),
  stack: z.string().describe(byteNote('The stack is', Limits.MaxErrorStackBytes)).optional(),
  retryable: z.boolean().describe('false ends the retry chain').optional(),
});

const durationMs = z.int().min(0).describe('How long the handler ran (ms), as the worker measured it. Absent: the worker did not say.').optional();

const exitCode = z.int().describe("The command's exit code (docket work), when the worker reported one.").optional();

/** The log stores a submit without the fields that hold these values (machines/job.events.ts SubmittedAbsent). */
const absent = (field: keyof typeof SubmittedAbsent): string => `Absent: ${JSON.stringify(SubmittedAbsent[field])} (the log leaves out a field that holds it).`;

export const jobEventDataSchemas = {
  'job.submitted': z.looseObject({
    job_id: idToken.describe('The job id: the same as the aggregate id.'),
    key: z
      .union([z.string(), jsonObject('A key')])
      .nullable()
      .describe(`The job's readable key (a string or an object), or null. ${byteNote('The key is', Limits.MaxKeyBytes)} ${absent('key')}`)
      .optional(),
    params: jsonObject('The params').describe(`The params: a JSON object ${DEPTH_NOTE}. ${byteNote('They are', Limits.MaxParamsBytes)}`),
    priority: z.int().min(Priority.Min).max(Priority.Max).describe('0..255, lower first.'),
    position: z.number().nullable().describe(`Second part of the order key; null: this event's own position in the log. ${absent('position')}`).optional(),
    run_at: isoTime.describe("The job may be claimed from this time. Absent: the event's own time.").optional(),
    max_attempts: z.int().min(1).describe(absent('max_attempts')).optional(),
    backoff: backoff.describe(absent('backoff')).optional(),
    attempt: z.int().min(1).describe(`1 for a new job; the failed job's attempt + 1 for a retry. ${absent('attempt')}`).optional(),
    retry_of: idToken.nullable().describe(`The failed job this one retries, or null. ${absent('retry_of')}`).optional(),
    waiting: z.boolean().describe(`true: the job waits until job.released. ${absent('waiting')}`).optional(),
    concurrency_key: z.string().nullable().describe("Flow control's key: the queue's key_concurrency and key_rate hold per key. Absent or null: none.").optional(),
    depends_on: z.array(idToken).describe('Jobs (any queue) it waits for: released when all succeeded, skipped when one ends otherwise. Absent: none.').optional(),
    template: z.looseObject({ name: z.string(), revision: z.int().min(1) }).describe('The template (and its revision) the job was made from. Absent: none.').optional(),
    schedule: z
      .looseObject({ name: z.string(), tick: isoTime, trigger: z.enum(FireTriggers) })
      .describe("The schedule fire that made the job: its schedule.fired names the same tick and job id. Absent: not a schedule's.")
      .optional(),
    fan_out: z
      .looseObject({ nodes: z.array(z.string()).min(1), quorum: z.int().min(1), quorum_timeout_ms: z.int().min(0) })
      .describe("A fan-out job: the nodes chosen (recorded, so a replay sees the same set), its quorum and quorum timeout. Its own run (worker docket:fan-out) and one jobnode.created per node are in the same commit. Absent: an ordinary job.")
      .optional(),
  }),
  'job.released': z.looseObject({}).describe('No fields: waiting -> queued.'),
  'job.moved': z.looseObject({
    priority: z.int().min(Priority.Min).max(Priority.Max),
    position: z.number().nullable().describe("null keeps the position of job.submitted."),
    run_at: isoTime.describe('A promote: the job may be claimed from this time.').optional(),
  }),
  'job.claimed': z.looseObject({
    run_id: idToken.describe("The run's id: the handle of its completion."),
    worker: z.string(),
    host: z.string(),
    pid: z.int().min(0),
    version: z.string(),
    lease_ms: z.int().min(1),
    user: z.string().describe("The worker's user (seed 000's error record). Absent: the worker did not say.").optional(),
    connection_id: z.int().min(0).describe("The worker's NATS client id on its server. Absent: the worker did not say.").optional(),
  }),
  'job.succeeded': z.looseObject({
    run_id: idToken,
    result: jsonValue('The result').describe(`The result: any JSON value ${DEPTH_NOTE}, null when the worker sent none. ${byteNote('It is', Limits.MaxResultBytes)}`),
    exit_code: exitCode,
    duration_ms: durationMs,
  }),
  'job.failed': z.looseObject({
    run_id: idToken,
    reason: z.enum(Object.values(FailureReasons)).describe('error (the worker failed it), lease_expired, crash_recovery, or cancelled (the job was cancelled while running).'),
    error: jobError.nullable(),
    exit_code: exitCode,
    duration_ms: durationMs,
  }),
  'job.cancelled': z.looseObject({ reason: z.string().nullable() }),
  'job.ignored': z.looseObject({ reason: z.string().nullable() }),
  'job.skipped': z.looseObject({
    run_id: idToken.nullable().describe('Set when the handler of a running job skipped it.'),
    reason: z.string().nullable(),
  }),
  'job.artifact_added': z.looseObject({
    run_id: idToken,
    artifact: z.looseObject({
      name: z.string(),
      uri: z.string().optional(),
      meta: jsonObject('The metadata').describe(`The metadata: a JSON object ${DEPTH_NOTE}. ${byteNote('It is', Limits.MaxArtifactMetaBytes)}`).optional(),
    }),
  }),
  'job.removed': z
    .looseObject({
      reason: z.enum(RemovalReasons).describe('cleaned (docket.cmd.clean), or a job set\'s stale, orphan, deleted or completed.'),
    })
    .describe('The job left every view (progress, list, queue order, key index: its key is free); the log keeps it. From waiting, queued or an ended state; never from running.'),
} as const satisfies Record<JobEventType, z.ZodType>;

// ---------------------------------------------------------------------------------------------
// The envelope

export const eventMetaSchema = z.looseObject({
  node: z.string().describe('The node that decided the event.'),
  command_id: z.string().describe('The command that asked for it, when the client sent an id.').optional(),
  command_hash: z.string().describe("Hash of that command's body: a reused command id with another body is a conflict.").optional(),
  correlation_id: z.string().optional(),
  causation_id: z.string().optional(),
  actor: z.string().optional(),
});

const envelopeFields = {
  id: z.string().min(1).describe('Unique event id.'),
  time: z.string().describe('ISO-8601 time the event was decided (node clock).'),
  queue: queueName.describe('The queue of a queue-partition aggregate.').optional(),
  meta: eventMetaSchema,
};

const NOT_EXPRESSED =
  "Not expressed by this schema: event ids are unique; data.job_id of job.submitted equals aggregate.id; an event's queue is the queue of the partition it is stored in; whether an event is legal for its job (the machines decide, `docket audit` checks).";

function jobEventSchema<T extends JobEventType>(type: T) {
  return z
    .looseObject({
      ...envelopeFields,
      type: z.literal(type),
      time: isoTime.describe('ISO-8601 time the event was decided (node clock).'),
      aggregate: z.looseObject({ kind: z.literal('job'), id: idToken.describe('The job id.') }),
      data: jobEventDataSchemas[type],
    })
    .describe(`A ${type} event: the envelope with this type's data. ${NOT_EXPRESSED}`);
}

export const jobEventSchemas = Object.fromEntries(JOB_EVENT_TYPES.map((type) => [type, jobEventSchema(type)])) as { [T in JobEventType]: ReturnType<typeof jobEventSchema<T>> };

/** Any job event: a union on `type`. */
export const jobEventUnionSchema = z.discriminatedUnion(
  'type',
  JOB_EVENT_TYPES.map((type) => jobEventSchemas[type]) as unknown as [ReturnType<typeof jobEventSchema>, ...ReturnType<typeof jobEventSchema>[]],
);

// ---------------------------------------------------------------------------------------------
// Events of the other kinds this version writes (machines/aggregates.ts)

const rate = z.looseObject({ limit: z.int().min(1), period_ms: z.int().min(1) }).describe('At most limit claims in any window of period_ms.');
const reservationId = idToken.describe("The reservation's id: <queue>-<22 characters>.");

/** The data of every non-job event type, with its kind. */
export const aggregateEventDataSchemas = {
  'queue.paused': ['queue', z.looseObject({ reason: z.string().nullable() }).describe('active -> paused; meta.actor names who paused it when the command said.')],
  'queue.resumed': ['queue', z.looseObject({}).describe('paused -> active.')],
  'queue.settings_changed': [
    'queue',
    z
      .looseObject({
        concurrency: z.int().min(1).nullable().optional(),
        rate: rate.nullable().optional(),
        key_concurrency: z.int().min(1).nullable().optional(),
        key_rate: rate.nullable().optional(),
      })
      .describe('The settings it names change (null clears one); the others keep their values.'),
  ],
  'queue.jobset_put': [
    'queue',
    z
      .looseObject({
        key_source: z.looseObject({}).describe('{url, sql, password_env?, timeout_ms?} (the URL without a password), {command}, {file} or {keys}: schemas/cmd.jobset.put.json'),
        target: z.looseObject({}).describe('The keys already computed, in the same forms.').optional(),
        attributes: z.array(z.string()).optional(),
        keep_completed: z.boolean().optional(),
        stale_timeout_s: z.int().min(0).optional(),
        auto_refresh: z.boolean().optional(),
        default_priority: z.int().optional(),
        version: z.string().optional(),
      })
      .describe("The queue is a job set with this definition (it replaces the previous one; a setting left out is not set: docket's default applies)."),
  ],
  'queue.refreshed': [
    'queue',
    z
      .looseObject({ added: z.int().min(0), removed: z.int().min(0), orphaned: z.int().min(0), re_pended: z.int().min(0) })
      .describe("A refresh of the job set, with its counts; its job events are in the same commits or just before (a resend of the command answers with these counts)."),
  ],
  'reservation.activated': [
    'reservation',
    z.looseObject({ reservation_id: reservationId, holder: z.string(), expires_at: isoTime, job_id: idToken.nullable().describe('The direct job created and claimed in the same commit, if any.') }),
  ],
  'reservation.renewed': ['reservation', z.looseObject({ reservation_id: reservationId, expires_at: isoTime })],
  'reservation.released': ['reservation', z.looseObject({ reservation_id: reservationId })],
  'reservation.expired': ['reservation', z.looseObject({ reservation_id: reservationId }).describe("Decided at or after the reservation's expires_at.")],
  'jobnode.created': [
    'jobnode',
    z
      .looseObject({
        job_id: idToken.describe('The fan-out job (its job.submitted, with fan_out, is in the same commit).'),
        node: z.string().describe('The worker node this entry is for (a Worker\'s `node`).'),
        of: z.int().min(1).describe('How many nodes the job fanned out to.'),
        quorum: z.int().min(1).describe('How many of them must complete for the job to succeed.'),
        quorum_timeout_ms: z.int().min(0).describe('After the first node completed, nodes not ended by then are skipped.'),
        max_attempts: z.int().min(1),
        backoff,
      })
      .describe("One fan-out job's entry for one node (id derived from (job id, node)): new -> queued."),
  ],
  'jobnode.claimed': ['jobnode', z.looseObject({ run_id: idToken, worker: z.string(), host: z.string(), pid: z.int().min(0), lease_ms: z.int().min(1) }).describe('queued -> running: a worker of its node took it; the position is the run\'s fencing token.')],
  'jobnode.completed': ['jobnode', z.looseObject({ run_id: idToken, result: jsonValue('The result'), duration_ms: durationMs }).describe('running -> completed.')],
  'jobnode.retrying': [
    'jobnode',
    z.looseObject({ run_id: idToken, reason: z.enum(Object.values(FailureReasons)), error: jobError.nullable(), retry_at: isoTime.describe('Queued again then (the job\'s backoff).') }).describe('running -> retrying: the run failed with attempts left.'),
  ],
  'jobnode.failed': ['jobnode', z.looseObject({ run_id: idToken, reason: z.enum(Object.values(FailureReasons)), error: jobError.nullable() }).describe('running -> failed: its last attempt failed.')],
  'jobnode.requeued': ['jobnode', z.looseObject({}).describe('retrying -> queued, at or after retry_at.')],
  'jobnode.skipped': ['jobnode', z.looseObject({ reason: z.string() }).describe('queued | retrying | running -> skipped: the job ended without this node (quorum reached or lost, or the quorum timeout).')],
  'jobnode.cancelled': ['jobnode', z.looseObject({ reason: z.string().nullable() }).describe('queued | retrying | running -> cancelled: the job was cancelled.')],
  'group.created': [
    'group',
    z.looseObject({
      name: z.string().nullable(),
      mode: z.enum(['sequential', 'parallel']),
      on_failure: z.enum(['stop', 'continue', 'skip']),
      members: z.array(z.looseObject({ job_id: idToken, queue: queueName })).min(1).describe('In order: a sequential group runs them one after another.'),
    }),
  ],
  'group.started': ['group', z.looseObject({ job_id: idToken.describe('The member whose start started the group.') })],
  'group.ended': ['group', z.looseObject({ status: z.enum(['completed', 'partial', 'cancelled']).describe("seed 003's derivation from the members' ends.") })],
  'template.put': [
    'template',
    z
      .looseObject({
        name: z.string(),
        revision: z.int().min(1).describe('1 for the first put, then the previous revision + 1.'),
        queue: queueName,
        params: jsonObject('Default params of its jobs (a submit\'s are merged over them, shallow by key)'),
        priority: z.int().min(Priority.Min).max(Priority.Max).optional(),
        max_attempts: z.int().min(1).optional(),
        backoff: backoff.optional(),
        lease_ms: z.int().min(1).optional(),
        description: z.string().optional(),
      })
      .describe('Creates or revises a template (partition sys, id = its name); an archived one becomes active again.'),
  ],
  'template.archived': ['template', z.looseObject({}).describe('active -> archived: new jobs from it are refused.')],
  'schedule.put': [
    'schedule',
    z
      .looseObject({
        name: z.string(),
        revision: z.int().min(1).describe('1 for the first put, then the previous revision + 1.'),
        paused: z.boolean().describe('true: disabled after this put.'),
        template: z.string().nullable().describe("The template its jobs are made from, or null with job."),
        job: z.looseObject({ queue: queueName, params: jsonObject('Params').optional(), priority: z.int().optional(), max_attempts: z.int().optional(), backoff: backoff.optional() }).nullable(),
        cron: z.string().describe('5 fields, or 6 with seconds first (croner).'),
        timezone: z.string().describe('IANA time zone (canonical name).'),
        start_at: isoTime.nullable(),
        end_at: isoTime.nullable(),
        jitter_ms: z.int().min(0),
        catchup: z.enum(CatchupPolicies),
        catchup_window_ms: z.int().min(0).nullable(),
        overlap: z.enum(OverlapPolicies),
        params: jsonObject('Merged over the template\'s params').nullable(),
        note: z.string().nullable(),
      })
      .describe('Creates or revises a schedule (partition sys, id = its name), every default resolved.'),
  ],
  'schedule.enabled': ['schedule', z.looseObject({}).describe('disabled -> enabled: ticks due while disabled are then missed as paused.')],
  'schedule.disabled': ['schedule', z.looseObject({ note: z.string().nullable() }).describe('enabled -> disabled.')],
  'schedule.deleted': ['schedule', z.looseObject({}).describe('-> deleted: nothing fires; a put revives the name under the next revision.')],
  'schedule.fired': [
    'schedule',
    z
      .looseObject({
        tick: isoTime.describe('The tick fired (ISO-8601 UTC); for a manual trigger, its time.'),
        job_id: idToken.describe('The job the fire makes: derived from (schedule, tick), or from the trigger command for manual.'),
        trigger: z.enum(FireTriggers).optional().describe('Absent means cron.'),
      })
      .describe("One fire; its job is submitted to the job's queue right after this commit."),
  ],
  'schedule.missed': [
    'schedule',
    z
      .union([
        z.looseObject({ tick: isoTime, reason: z.enum(MissReasons) }),
        z.looseObject({ from: isoTime, to: isoTime, count: z.int().min(1), reason: z.enum(MissReasons) }).describe('count consecutive ticks from..to (both ticks), once more than 100 were missed in one run.'),
      ])
      .describe('A tick (or a stretch of ticks) not fired, with the policy\'s reason.'),
  ],
} as const satisfies Record<AggregateEvent['type'], readonly [AggregateKind, z.ZodType]>;

type AggregateEventType = keyof typeof aggregateEventDataSchemas;
/** Kinds whose aggregates live in partition sys (machines/aggregates.ts): their events carry no queue. */
const SYS_KINDS = new Set<string>(AGGREGATE_KINDS.filter((kind) => aggregateDefinition(kind)?.inQueue === false));
const AGGREGATE_TYPES = Object.keys(aggregateEventDataSchemas) as AggregateEventType[];

function aggregateEventSchema<T extends AggregateEventType>(type: T) {
  const [kind, data] = aggregateEventDataSchemas[type];
  return z
    .looseObject({
      ...envelopeFields,
      type: z.literal(type),
      time: isoTime.describe('ISO-8601 time the event was decided (node clock).'),
      aggregate: z.looseObject({ kind: z.literal(kind), id: z.string().describe(kind === 'group' ? "The group's id." : SYS_KINDS.has(kind) ? `The ${kind}'s name.` : `The ${kind}'s id: the queue's name.`) }),
      // A sys aggregate (group, template, schedule) lives in partition sys: no queue.
      ...(SYS_KINDS.has(kind) ? {} : { queue: queueName.describe('The queue of the aggregate (its partition is q.<queue>).') }),
      data,
    })
    .describe(`A ${type} event. Whether it is legal for its aggregate is the machines' to decide (\`docket audit\` checks).`);
}

export const aggregateEventSchemas = Object.fromEntries(AGGREGATE_TYPES.map((type) => [type, aggregateEventSchema(type)])) as { [T in AggregateEventType]: ReturnType<typeof aggregateEventSchema<T>> };

const aggregateEventUnionSchema = z.discriminatedUnion(
  'type',
  AGGREGATE_TYPES.map((type) => aggregateEventSchemas[type]) as unknown as [ReturnType<typeof aggregateEventSchema>, ...ReturnType<typeof aggregateEventSchema>[]],
);

const WRITTEN_KINDS = new Set<string>(['job', ...Object.values(aggregateEventDataSchemas).map(([kind]) => kind)]);
const OTHER_KINDS = AGGREGATE_KINDS.filter((kind) => !WRITTEN_KINDS.has(kind));

/** An event of another aggregate kind: DESIGN reserves the kinds; their data is not specified yet. */
export const otherEventSchema = z
  .looseObject({
    ...envelopeFields,
    type: z.string(),
    aggregate: z.looseObject({ kind: z.enum(OTHER_KINDS as [string, ...string[]]), id: z.string() }),
    data: z.record(z.string(), z.unknown()),
  })
  .describe(`An event of an aggregate of another kind (${OTHER_KINDS.join(', ')}): kinds DESIGN reserves, whose events this version does not write; their data is a JSON object.`);

const EVENT_NOTE = `An event (log v2): {id, type, time, aggregate:{kind, id}, queue?, data, meta:{node, ...}}. A job event (aggregate kind job) has one of the job event types and its data. ${NOT_EXPRESSED}`;

export const eventSchema = z.union([jobEventUnionSchema, aggregateEventUnionSchema, otherEventSchema]).describe(EVENT_NOTE);

// ---------------------------------------------------------------------------------------------
// The commit and the live event

export const commitSchema = z
  .looseObject({
    v: z.union(READ_COMMIT_VERSIONS.map((v) => z.literal(v))).describe(`The commit format version: ${COMMIT_VERSION} is written; 2 stored every job.submitted whole, ${COMMIT_VERSION} leaves out a submit's fields that hold what their absence means.`),
    commit: z.string().min(1).describe("The commit id, unique per writer (node, lease epoch, counter); the append's Nats-Msg-Id."),
    partition: z.string().regex(/^(q\.[A-Za-z0-9_-]{1,64}|sys)$/).describe('q.<queue> or sys.'),
    writer: z.looseObject({ node: z.string(), epoch: z.int().min(0).describe("The writer's lease epoch: never goes back within a partition.") }),
    prev_hash: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .nullable()
      .describe("SHA-256 (hex) of the partition's previous commit payload as stored; null for its first."),
    events: z.array(eventSchema).max(POSITION_SPAN - 1).describe('The events of the partition, in order.'),
  })
  .describe(
    'One stored message of the stream DOCKET (subject docket.log.q.<queue> or docket.log.sys): the commit of one partition; also published live, as stored, on docket.live.q.<queue> or docket.live.sys with its stream sequence in the Docket-Seq header. ' +
      "Not expressed by this schema: partition is the one its subject names; prev_hash is the hash of the previous commit of the partition as stored (the hash chain `docket audit` checks); epochs never go back within a partition; the events' aggregates belong to the partition.",
  );

export const positionSchema = z
  .looseObject({
    seq: z.int().min(1).describe('The stream sequence of the commit holding the event.'),
    index: z.int().min(0).max(POSITION_SPAN - 1).describe('The index of the event in its commit.'),
  })
  .describe('The position of the event in the log: (commit sequence, index). A run\'s fencing token is seq * 65536 + index of its job.claimed.');

export const liveEventSchema = z
  .intersection(z.looseObject({ position: positionSchema }), z.union([jobEventUnionSchema, aggregateEventUnionSchema]))
  .describe(
    'A live event, published on core NATS (not stored) by a node started with liveEvents: each, on docket.evt.<kind>.<queue>.<id> after its commit is acknowledged (docket.evt.job.<queue>.<job_id> for a job): an event with its position in front. By default a node publishes only each commit, as stored, on docket.live.q.<queue> or docket.live.sys (the commit schema), with its stream sequence in the Docket-Seq header. ' +
      'Not expressed by this schema: the subject names the event\'s queue and aggregate id. Durable, gap-free reading is the log itself.',
  );

// ---------------------------------------------------------------------------------------------
// JSON Schemas

/**
 * Said on every schema: what is open. Objects are open so that a field added in a later version
 * (the commit's `v` changes only when a reader would misread it) does not make consumers refuse.
 */
const OPEN_NOTE = 'Objects are open: docket may add fields in a later version of the same commit format; ignore the ones you do not know.';

function generate(title: string, schema: z.ZodType): JsonSchema {
  const json = z.toJSONSchema(schema, { io: 'input', target: 'draft-2020-12' }) as JsonSchema;
  delete json['$schema'];
  const description = [typeof json['description'] === 'string' ? json['description'] : undefined, OPEN_NOTE].filter((d) => d !== undefined).join(' ');
  const { description: _, ...rest } = json;
  return { $schema: DRAFT, title, description, ...rest };
}

/** The event and commit schemas by file name (without .json). */
export function eventJsonSchemas(): Record<string, JsonSchema> {
  return {
    commit: generate('docket commit (log v2)', commitSchema),
    event: generate('docket event (log v2)', eventSchema),
    'live-event': generate('docket live event (docket.evt.job.<queue>.<job_id>)', liveEventSchema),
    ...Object.fromEntries(JOB_EVENT_TYPES.map((type) => [`event.${type}`, generate(`docket ${type} event`, jobEventSchemas[type])])),
    ...Object.fromEntries(AGGREGATE_TYPES.map((type) => [`event.${type}`, generate(`docket ${type} event`, aggregateEventSchemas[type])])),
  };
}
