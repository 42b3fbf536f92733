/**
 * The shipped JSON Schemas (schemas/*.json) against the node's zod validators:
 * - the files are what `npm run schemas` writes now;
 * - on fast-check samples (arbitrary JSON, and commands built field by field from values valid or
 *   not), whatever the node accepts the schema accepts: a client validating with the schema never
 *   refuses a request the node would take;
 * - where the node refuses for a reason the schema expresses (every zod issue but `custom`, which
 *   is the byte and depth limits, and string lengths, counted in other units), the schema refuses too.
 * Ajv is the validator an outside client would use (draft 2020-12, formats from ajv-formats).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test as fcTest } from '@fast-check/vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import type { z } from 'zod';
import { describe, expect, test } from 'vitest';
import { JOB_STATUSES } from '../../machines/index.js';
import { jsonSchemas, schemaFileText, shippedSchemas } from '../../src/commands/json-schemas.js';
import { deleteSchema, ignoreSchema, jobSetPutSchema, jobSetShowSchema, refreshSchema } from '../../src/commands/jobset-schemas.js';
import {
  cancelSchema,
  claimSchema,
  completeSchema,
  failSchema,
  getSchema,
  heartbeatSchema,
  jobSpecSchema,
  listSchema,
  moveSchema,
  promoteSchema,
  completeBatchSchema,
  failBatchSchema,
  progressSchema,
  retrySchema,
  submitBatchSchema,
  submitOneSchema,
  retryAllSchema,
  cancelAllSchema,
  cleanSchema,
} from '../../src/commands/schemas.js';
import { groupCancelSchema, groupCreateSchema, groupGetSchema, groupListSchema } from '../../src/commands/group-schemas.js';
import { pauseSchema, queueSetSchema, queueShowSchema, releaseSchema, renewSchema, reservationsSchema, reserveSchema, resumeSchema } from '../../src/commands/queue-schemas.js';
import {
  scheduleBackfillSchema,
  scheduleDeleteSchema,
  scheduleDisableSchema,
  scheduleEnableSchema,
  schedulePreviewSchema,
  schedulePutSchema,
  scheduleTriggerSchema,
  templateArchiveSchema,
  templatePutSchema,
  scheduleGetSchema,
  scheduleListSchema,
  templateGetSchema,
  templateListSchema,
} from '../../src/commands/schedule-schemas.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 300);
const SCHEMA_DIR = join(import.meta.dirname, '..', '..', 'schemas');

// strictRequired off: `not: { required: [...] }` ("not both") names properties defined beside it, not in it.
const ajv = new Ajv2020({ strict: true, strictRequired: false });
addFormats.default(ajv);
const generated = jsonSchemas();
const schemaValidators = Object.fromEntries(Object.entries(generated).map(([name, schema]) => [name, ajv.compile(schema)]));

/** The node's validator of each schema: submit picks one job or a batch as validateSubmit does. */
const NODE: Record<string, (value: unknown) => z.ZodSafeParseResult<unknown>> = {
  'job-spec': (v) => jobSpecSchema.safeParse(v),
  'cmd.submit': (v) => (v !== null && typeof v === 'object' && 'jobs' in v ? submitBatchSchema.safeParse(v) : submitOneSchema.safeParse(v)),
  'cmd.cancel': (v) => cancelSchema.safeParse(v),
  'cmd.get': (v) => getSchema.safeParse(v),
  'cmd.list': (v) => listSchema.safeParse(v),
  'cmd.progress': (v) => progressSchema.safeParse(v),
  'cmd.retry': (v) => retrySchema.safeParse(v),
  'cmd.move': (v) => moveSchema.safeParse(v),
  'cmd.promote': (v) => promoteSchema.safeParse(v),
  'cmd.pause': (v) => pauseSchema.safeParse(v),
  'cmd.group.create': (v) => groupCreateSchema.safeParse(v),
  'cmd.group.get': (v) => groupGetSchema.safeParse(v),
  'cmd.group.list': (v) => groupListSchema.safeParse(v),
  'cmd.group.cancel': (v) => groupCancelSchema.safeParse(v),
  'cmd.resume': (v) => resumeSchema.safeParse(v),
  'cmd.queue.set': (v) => queueSetSchema.safeParse(v),
  'cmd.queue.show': (v) => queueShowSchema.safeParse(v),
  'cmd.reserve': (v) => reserveSchema.safeParse(v),
  'cmd.release': (v) => releaseSchema.safeParse(v),
  'cmd.renew': (v) => renewSchema.safeParse(v),
  'cmd.reservations': (v) => reservationsSchema.safeParse(v),
  'cmd.retry_all': (v) => retryAllSchema.safeParse(v),
  'cmd.cancel_all': (v) => cancelAllSchema.safeParse(v),
  'cmd.clean': (v) => cleanSchema.safeParse(v),
  'cmd.jobset.put': (v) => jobSetPutSchema.safeParse(v),
  'cmd.refresh': (v) => refreshSchema.safeParse(v),
  'cmd.jobset.show': (v) => jobSetShowSchema.safeParse(v),
  'cmd.ignore': (v) => ignoreSchema.safeParse(v),
  'cmd.delete': (v) => deleteSchema.safeParse(v),
  'cmd.template.put': (v) => templatePutSchema.safeParse(v),
  'cmd.template.archive': (v) => templateArchiveSchema.safeParse(v),
  'cmd.schedule.put': (v) => schedulePutSchema.safeParse(v),
  'cmd.schedule.enable': (v) => scheduleEnableSchema.safeParse(v),
  'cmd.schedule.disable': (v) => scheduleDisableSchema.safeParse(v),
  'cmd.schedule.delete': (v) => scheduleDeleteSchema.safeParse(v),
  'cmd.schedule.trigger': (v) => scheduleTriggerSchema.safeParse(v),
  'cmd.schedule.backfill': (v) => scheduleBackfillSchema.safeParse(v),
  'cmd.schedule.preview': (v) => schedulePreviewSchema.safeParse(v),
  'cmd.template.get': (v) => templateGetSchema.safeParse(v),
  'cmd.template.list': (v) => templateListSchema.safeParse(v),
  'cmd.schedule.get': (v) => scheduleGetSchema.safeParse(v),
  'cmd.schedule.list': (v) => scheduleListSchema.safeParse(v),
  'work.claim': (v) => claimSchema.safeParse(v),
  'work.heartbeat': (v) => heartbeatSchema.safeParse(v),
  'work.complete': (v) => (v !== null && typeof v === 'object' && 'runs' in v ? completeBatchSchema.safeParse(v) : completeSchema.safeParse(v)),
  'work.fail': (v) => (v !== null && typeof v === 'object' && 'runs' in v ? failBatchSchema.safeParse(v) : failSchema.safeParse(v)),
};

// Samples are built field by field: in 'valid' mode from valid values only (what the node must
// accept, so the schema must too), in 'mixed' mode with values past the limits or of any JSON now
// and then (what the node refuses, mostly for reasons the schema must express).
type Mode = 'valid' | 'mixed';
const anyJson = fc.jsonValue({ maxDepth: 3 });
const jsonObject = fc.dictionary(fc.string({ maxLength: 8 }), anyJson, { maxKeys: 4 });

function arbs(mode: Mode) {
  const pick = <T>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> =>
    mode === 'valid' ? valid : fc.oneof({ weight: 5, arbitrary: valid }, { weight: 1, arbitrary: invalid }, { weight: 1, arbitrary: anyJson });
  // Lengths as zod counts them (UTF-16 code units); graphemes bring characters outside the BMP.
  const text = (minLength: number, maxLength: number) =>
    pick(
      fc.oneof(fc.string({ minLength, maxLength }), fc.string({ minLength, maxLength, unit: 'grapheme' }).filter((t) => t.length <= maxLength)),
      fc.string({ minLength: maxLength + 1, maxLength: maxLength + 3 }),
    );
  const int = (min: number, max: number) => pick(fc.integer({ min, max }), fc.oneof(fc.constant(min - 1), fc.constant(max + 1), fc.double()));
  const queue = pick(fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/), fc.string({ maxLength: 70 }));
  const idToken = pick(fc.stringMatching(/^[A-Za-z0-9_-]{1,128}$/), fc.string({ maxLength: 130 }));
  const runAt = pick(
    fc.oneof(
      fc.date({ min: new Date('1900-01-01T00:00:00Z'), max: new Date('2200-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString()),
      fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString().replace(/\.\d+Z$/, '-07:00')),
    ),
    fc.oneof(fc.string({ maxLength: 30 }), fc.constant('2030-02-30T00:00:00Z'), fc.constant('2030-01-01T00:00:00')),
  );
  const backoff = pick(
    fc.record({ base_ms: fc.nat(), max_ms: fc.nat(), jitter: fc.double({ min: 0, max: 1, noNaN: true }) }),
    fc.record({ base_ms: int(0, 1e6), max_ms: int(0, 1e6), jitter: fc.double({ noNaN: true, noDefaultInfinity: true }) }, { requiredKeys: [] }),
  );
  const jobSpec = fc
    .record(
      {
        queue,
        // A valid key is at most 1,024 bytes of JSON: an object sample over it is not a valid sample.
        key: pick(fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), jsonObject.filter((k) => Buffer.byteLength(JSON.stringify(k)) <= 1_024)), fc.constant('')),
        params: pick(jsonObject, fc.array(anyJson)),
        priority: int(0, 255),
        delay_ms: int(0, 316_224_000_000),
        run_at: runAt,
        max_attempts: int(1, 1000),
        backoff,
        concurrency_key: text(1, 200),
      },
      { requiredKeys: ['queue'] },
    )
    // delay_ms and run_at together are refused: a valid spec has at most one.
    .map((spec) => (mode === 'valid' && 'delay_ms' in spec ? (({ run_at: _, ...rest }) => rest)(spec) : spec));
  const commandId = text(1, 200);
  const claimFields = { worker: text(1, 200), max: int(1, 1000), lease_ms: int(1000, 86_400_000), host: text(0, 200), pid: int(0, 1e6), version: text(0, 200) };
  const jobError = pick(
    fc.record({ message: fc.string({ maxLength: 50 }), stack: fc.string({ maxLength: 50 }), retryable: fc.boolean() }, { requiredKeys: ['message'] }),
    fc.record({ stack: fc.string() }),
  );
  const required = <K extends string>(...keys: K[]) => ({ requiredKeys: mode === 'valid' ? keys : [] });
  // Job sets (src/commands/jobset-schemas.ts): key attributes, key sources, restrictions.
  const attrName = fc.stringMatching(/^[a-z_]{1,10}$/).filter((a) => a !== 'prototype' && a !== '__proto__');
  const scalar = fc.oneof(fc.string({ maxLength: 6 }), fc.integer(), fc.boolean(), fc.constant(null));
  const keyObject = fc.dictionary(attrName, scalar, { minKeys: 1, maxKeys: 3 });
  const timeoutMs = int(1000, 3_600_000);
  const keySource = pick(
    fc.oneof(
      fc.record(
        {
          url: fc.constantFrom('postgres://app@db:5432/lab', 'postgresql://db/lab', 'mysql://root@127.0.0.1:3306/test', 'mariadb://u@h/d'),
          sql: fc.string({ minLength: 1, maxLength: 40 }),
          password_env: fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,20}$/),
          timeout_ms: timeoutMs,
        },
        { requiredKeys: ['url', 'sql'] },
      ),
      fc.record({ command: fc.array(fc.string({ minLength: 1, maxLength: 10 }), { minLength: 1, maxLength: 4 }), timeout_ms: timeoutMs }, { requiredKeys: ['command'] }),
      fc.record({ file: fc.string({ minLength: 1, maxLength: 40 }) }),
      fc.record({ keys: fc.array(keyObject, { maxLength: 3 }) }),
    ),
    fc.oneof(fc.constant({ url: 'postgres://app:secret@db/lab', sql: 'SELECT 1' }), fc.constant({ command: [] }), fc.constant({ file: '' }), fc.constant({ sql: 'SELECT 1' }), fc.record({ keys: fc.constant([{}]) })),
  );
  const restrictTerm = fc.dictionary(attrName, scalar, { maxKeys: 3 });
  // Schedules: names, crons and zones the node knows, or not (a bad cron or zone is a refinement).
  const name = pick(fc.stringMatching(/^[A-Za-z0-9_-]{1,128}$/), fc.string({ maxLength: 130 }));
  const cron = pick(fc.constantFrom('* * * * *', '*/5 * * * * *', '0 9 * * MON-FRI', '30 2 * * *', '@daily', '0 0 1 */3 *'), fc.constantFrom('bogus', '61 * * * *', '* * * *', '0 0 31 2 *', ''));
  const timezone = pick(fc.constantFrom('UTC', 'Europe/Berlin', 'America/New_York', 'asia/tokyo'), fc.constantFrom('Mars/Olympus', '', '+01:00'));
  const instant = (minMs: number, maxMs: number) => fc.integer({ min: minMs, max: maxMs }).map((ms) => new Date(ms).toISOString());
  const time = pick(instant(Date.UTC(2020, 0, 1), Date.UTC(2040, 0, 1)), fc.constantFrom('yesterday', '2030-02-30T00:00:00Z', '2030-01-01T00:00:00'));
  const note = text(0, 1000);
  const ordered = (o: Record<string, unknown>, a: string, b: string) =>
    mode === 'valid' && typeof o[a] === 'string' && typeof o[b] === 'string' && Date.parse(o[b] as string) <= Date.parse(o[a] as string) ? (({ [b]: _, ...rest }) => rest)(o) : o;
  const scheduleJob = pick(fc.record({ queue, params: jsonObject, priority: int(0, 255), max_attempts: int(1, 1000), backoff }, required('queue')), fc.record({ params: jsonObject }));
  const byName = fc.record({ id: commandId, name }, required('name'));
  return {
    'cmd.jobset.put': fc.record(
      {
        id: commandId,
        queue,
        key_source: keySource,
        target: keySource,
        attributes: pick(fc.uniqueArray(attrName, { minLength: 1, maxLength: 4 }), fc.oneof(fc.constant([]), fc.constant(['a', 'a']))),
        keep_completed: pick(fc.boolean(), fc.constant('yes')),
        stale_timeout_s: int(0, 316_224_000),
        auto_refresh: pick(fc.boolean(), fc.constant(1)),
        default_priority: int(0, 255),
        version: text(1, 255),
      },
      required('queue', 'key_source'),
    ),
    'cmd.refresh': fc.record(
      {
        id: commandId,
        queue,
        restrict: pick(fc.oneof(restrictTerm, fc.array(restrictTerm, { maxLength: 3 })), fc.constant('lab = smith')),
        delay_ms: int(0, 316_224_000_000),
        priority: int(0, 255),
        stale_timeout_s: int(0, 316_224_000),
        orphan_timeout_s: int(1, 316_224_000),
      },
      required('queue'),
    ),
    'cmd.jobset.show': fc.record({ queue, remaining: pick(fc.boolean(), fc.constant('no')) }, required('queue')),
    'cmd.ignore': fc.record({ id: commandId, queue, key: keyObject, reason: text(0, 1000) }, required('queue', 'key')),
    'cmd.delete': fc.record({ id: commandId, queue, key: keyObject, status: pick(fc.constantFrom('pending', 'success', 'error', 'ignore'), fc.constant('reserved')), restrict: pick(fc.oneof(restrictTerm, fc.array(restrictTerm, { maxLength: 3 })), fc.constant('x')) }, required('queue')).map((c) => (mode === 'valid' && !('key' in c || 'status' in c || 'restrict' in c) ? { ...c, status: 'error' } : c)),
    'cmd.template.put': fc.record(
      { id: commandId, name, queue, params: pick(jsonObject, fc.array(anyJson)), priority: int(0, 255), max_attempts: int(1, 1000), backoff, lease_ms: int(1000, 86_400_000), description: note },
      required('name', 'queue'),
    ),
    'cmd.template.archive': byName,
    'cmd.schedule.put': fc
      .record(
        {
          id: commandId,
          name,
          template: name,
          job: scheduleJob,
          cron,
          timezone,
          start_at: time,
          end_at: time,
          jitter_ms: int(0, 3_600_000),
          catchup: pick(fc.constantFrom('none', 'latest', 'all'), fc.constant('some')),
          catchup_window_ms: int(0, 31_622_400_000),
          overlap: pick(fc.constantFrom('skip', 'buffer_one', 'buffer_all', 'allow_all', 'cancel_other'), fc.constant('queue')),
          params: pick(jsonObject, fc.array(anyJson)),
          paused: pick(fc.boolean(), fc.constant('yes')),
          note,
        },
        required('name', 'cron', 'template'),
      )
      // A valid put names a template or a job (exactly one) and ends after it starts.
      .map((p) => (mode === 'valid' ? ordered('job' in p ? (({ template: _, ...rest }) => rest)(p) : p, 'start_at', 'end_at') : p)),
    'cmd.schedule.enable': byName,
    'cmd.schedule.disable': fc.record({ id: commandId, name, note }, required('name')),
    'cmd.schedule.delete': byName,
    'cmd.schedule.trigger': byName,
    'cmd.schedule.backfill': fc
      .record({ id: commandId, name, from: time, to: time }, required('name', 'from', 'to'))
      .map((b) => (mode === 'valid' ? (Date.parse(b['to'] as string) < Date.parse(b['from'] as string) ? { ...b, from: b['to'], to: b['from'] } : b) : b))
      .map((b) => (mode === 'valid' && Date.parse(b['to'] as string) - Date.parse(b['from'] as string) > 366 * 86_400_000 ? { ...b, to: b['from'] } : b)),
    'cmd.schedule.preview': fc.record({ cron, timezone, from: time, count: int(1, 1000) }, required('cron')),
    'cmd.template.get': fc.record({ name }, required('name')),
    'cmd.template.list': fc.constant({}),
    'cmd.schedule.get': fc.record({ name }, required('name')),
    'cmd.schedule.list': fc.record({ status: pick(fc.constantFrom('enabled', 'disabled', 'deleted'), fc.constant('paused')) }, { requiredKeys: [] }),
    'job-spec': jobSpec,
    'cmd.submit': fc.oneof(
      fc.tuple(jobSpec, fc.option(commandId, { nil: undefined })).map(([spec, id]) => (id === undefined ? spec : { ...spec, id })),
      fc.record({ id: commandId, jobs: fc.array(jobSpec, { minLength: mode === 'valid' ? 1 : 0, maxLength: 4 }) }, required('jobs')),
    ),
    'cmd.cancel': fc.record({ id: commandId, job_id: idToken, reason: text(0, 1000) }, required('job_id')),
    'cmd.get': fc.record({ job_id: idToken }, required('job_id')),
    'cmd.list': fc.record(
      { queue, status: pick(fc.constantFrom(...JOB_STATUSES), fc.constant('bogus')), limit: int(1, 1000), cursor: pick(fc.stringMatching(/^\d+$/), fc.string({ maxLength: 5 })) },
      required('queue'),
    ),
    'cmd.progress': fc.record({ queue }, { requiredKeys: [] }),
    'cmd.retry': fc.record({ id: commandId, job_id: idToken }, required('job_id')),
    'cmd.promote': fc.record({ id: commandId, job_id: idToken }, required('job_id')),
    'cmd.move': fc
      .record({ id: commandId, job_id: idToken, priority: int(0, 255), before: idToken, after: idToken }, required('job_id'))
      // A valid move names a priority or one neighbour, never both neighbours.
      .map((m) => (mode === 'valid' ? ('before' in m ? (({ after: _, ...rest }) => rest)(m) : 'after' in m || 'priority' in m ? m : { ...m, priority: 1 }) : m)),
    'cmd.pause': fc.record({ id: commandId, queue, reason: text(0, 1000), actor: text(0, 1000), create: pick(fc.boolean(), fc.constant('yes')) }, required('queue')),
    'cmd.resume': fc.record({ id: commandId, queue, actor: text(0, 1000) }, required('queue')),
    'cmd.queue.set': fc
      .record(
        {
          id: commandId,
          queue,
          concurrency: pick(fc.option(fc.integer({ min: 1, max: 100_000 }), { nil: null }), fc.constantFrom(0, -1, 100_001)),
          rate: pick(fc.option(fc.record({ limit: fc.integer({ min: 1, max: 1_000_000 }), period_ms: fc.integer({ min: 100, max: 86_400_000 }) }), { nil: null }), fc.record({ limit: int(1, 10), period_ms: int(100, 1000) }, { requiredKeys: [] })),
          key_concurrency: pick(fc.option(fc.integer({ min: 1, max: 100_000 }), { nil: null }), fc.constant(0)),
          key_rate: pick(fc.option(fc.record({ limit: fc.integer({ min: 1, max: 10 }), period_ms: fc.integer({ min: 100, max: 10_000 }) }), { nil: null }), fc.constant({ limit: 1, period_ms: 99 })),
          actor: text(0, 1000),
          create: fc.boolean(),
        },
        required('queue'),
      )
      // A valid change names at least one setting.
      .map((c) => (mode === 'valid' && !('concurrency' in c || 'rate' in c || 'key_concurrency' in c || 'key_rate' in c) ? { ...c, concurrency: 1 } : c)),
    'cmd.queue.show': fc.record({ queue }, required('queue')),
    'cmd.group.create': fc
      .record(
        { id: commandId, name: text(1, 200), mode: pick(fc.constantFrom('sequential', 'parallel'), fc.constant('zigzag')), on_failure: pick(fc.constantFrom('stop', 'continue', 'skip'), fc.constant('retry')), jobs: fc.array(jobSpec, { minLength: mode === 'valid' ? 1 : 0, maxLength: 3 }) },
        required('mode', 'jobs'),
      )
      // A valid member has no key and no depends_on (a refinement the schema states in words).
      .map((g) => (mode === 'valid' && Array.isArray(g.jobs) ? { ...g, jobs: (g.jobs as Record<string, unknown>[]).map(({ key: _k, depends_on: _d, ...rest }) => rest) } : g)),
    'cmd.group.get': fc.record({ group_id: idToken }, required('group_id')),
    'cmd.group.list': fc.constant({}),
    'cmd.group.cancel': fc.record({ id: commandId, group_id: idToken, reason: text(0, 1000) }, required('group_id')),
    'cmd.reserve': fc
      .record({ id: commandId, queue, holder: text(1, 200), ttl_ms: int(1000, 86_400_000), lease_ms: int(1000, 86_400_000), create: fc.boolean(), job: jobSpec }, required('queue', 'holder', 'ttl_ms'))
      // A valid direct job is of the reserved queue.
      .map((r) => (mode === 'valid' && r.job !== undefined && typeof r.job === 'object' && r.job !== null ? { ...r, job: { ...(r.job as object), queue: r.queue } } : r)),
    'cmd.release': fc.record({ id: commandId, reservation_id: idToken }, required('reservation_id')),
    'cmd.renew': fc.record({ id: commandId, reservation_id: idToken, ttl_ms: int(1000, 86_400_000) }, required('reservation_id', 'ttl_ms')),
    'cmd.reservations': fc.record({ queue }, { requiredKeys: [] }),
    'cmd.retry_all': fc.record({ id: commandId, queue, since: runAt, dry_run: pick(fc.boolean(), fc.constant('yes')) }, required('queue')),
    'cmd.cancel_all': fc.record(
      { id: commandId, queue, status: pick(fc.constantFrom('queued', 'waiting', 'delayed'), fc.constantFrom('running', 'failed', 'bogus')), reason: text(0, 1000), dry_run: pick(fc.boolean(), fc.constant(1)) },
      required('queue', 'status'),
    ),
    'cmd.clean': fc.record(
      { id: commandId, queue, older_than_ms: int(0, Number.MAX_SAFE_INTEGER), status: pick(fc.constantFrom('succeeded', 'failed', 'cancelled', 'skipped', 'ignored'), fc.constantFrom('queued', 'running', 'removed')), dry_run: pick(fc.boolean(), fc.constant('no')) },
      required('queue', 'older_than_ms', 'status'),
    ),
    'work.claim': fc.record({ ...claimFields, wait_ms: int(0, 60_000) }, required('worker')),
    'work.heartbeat': fc.record({ worker: text(0, 200), run_ids: fc.array(idToken, { maxLength: 4 }), progress: fc.dictionary(fc.stringMatching(/^[A-Za-z0-9_-]{1,128}$/), anyJson, { maxKeys: 3 }) }, required('run_ids')),
    'work.complete': fc.oneof(
      fc.record({ run_id: idToken, job_id: idToken, result: anyJson, exit_code: int(-255, 255), next: fc.record(claimFields, required('worker')) }, required('run_id', 'job_id')),
      fc.record(
        { runs: fc.array(fc.record({ run_id: idToken, job_id: idToken, result: anyJson, exit_code: int(-255, 255) }, required('run_id', 'job_id')), { minLength: mode === 'valid' ? 1 : 0, maxLength: 3 }), next: fc.record(claimFields, required('worker')) },
        required('runs'),
      ),
    ),
    'work.fail': fc.oneof(
      fc.record({ run_id: idToken, job_id: idToken, error: jobError, exit_code: int(-255, 255), next: fc.record(claimFields, required('worker')) }, required('run_id', 'job_id', 'error')),
      fc.record(
        { runs: fc.array(fc.record({ run_id: idToken, job_id: idToken, error: jobError, exit_code: int(-255, 255) }, required('run_id', 'job_id', 'error')), { minLength: mode === 'valid' ? 1 : 0, maxLength: 3 }), next: fc.record(claimFields, required('worker')) },
        required('runs'),
      ),
    ),
  } satisfies Record<string, fc.Arbitrary<Record<string, unknown>>>;
}
const VALID: Record<string, fc.Arbitrary<Record<string, unknown>>> = arbs('valid');
const MIXED: Record<string, fc.Arbitrary<Record<string, unknown>>> = arbs('mixed');

/** Valid commands, commands with some fields wrong or unknown, and plain JSON of any shape. */
function samplesOf(name: string): fc.Arbitrary<unknown> {
  const withUnknown = fc.tuple(MIXED[name]!, anyJson).map(([v, extra]) => ({ ...v, unknown_field: extra }));
  return fc.oneof({ weight: 4, arbitrary: VALID[name]! }, { weight: 4, arbitrary: MIXED[name]! }, { weight: 1, arbitrary: withUnknown }, { weight: 1, arbitrary: anyJson });
}

/** Issues a JSON Schema can be asked to refuse as well: not refinements, not string lengths (counted in other units). */
function expressible(issues: readonly z.core.$ZodIssue[]): boolean {
  return issues.every((issue) => issue.code !== 'custom' && !((issue.code === 'too_big' || issue.code === 'too_small') && issue.origin === 'string'));
}

describe('the JSON Schemas in schemas/', () => {
  test('are the ones npm run schemas writes from the validators now', () => {
    // All of them: the replies' and events' (test/commands/event-schemas.props.test.ts) with the requests'.
    const shipped = shippedSchemas();
    for (const name of Object.keys(generated)) expect(shipped[name]).toEqual(generated[name]);
    const files = readdirSync(SCHEMA_DIR).filter((f) => f.endsWith('.json')).sort();
    expect(files).toEqual(Object.keys(shipped).map((name) => `${name}.json`).sort());
    for (const [name, schema] of Object.entries(shipped)) expect(readFileSync(join(SCHEMA_DIR, `${name}.json`), 'utf8'), name).toBe(schemaFileText(schema));
  });

  test('cover every validator', () => {
    expect(Object.keys(NODE).sort()).toEqual(Object.keys(generated).sort());
    expect(Object.keys(VALID).sort()).toEqual(Object.keys(generated).sort());
  });

  for (const name of Object.keys(generated)) {
    // Keeps the first property honest: half its samples come from here, and all of them are valid.
    fcTest.prop([VALID[name]!], { numRuns: Math.ceil(numRuns / 3) })(`${name}: the valid samples are accepted by the node and by the schema`, (sample) => {
      const value: unknown = JSON.parse(JSON.stringify(sample));
      const node = NODE[name]!(value);
      expect(node.success, node.success ? '' : JSON.stringify(node.error.issues)).toBe(true);
      expect(schemaValidators[name]!(value), JSON.stringify(schemaValidators[name]!.errors)).toBe(true);
    });

    fcTest.prop([samplesOf(name)], { numRuns })(`${name}: what the node accepts the schema accepts; what it refuses expressibly the schema refuses`, (sample) => {
      // What the node validates is the request as JSON text parsed again.
      const value: unknown = JSON.parse(JSON.stringify(sample) ?? 'null');
      const node = NODE[name]!(value);
      const schemaAccepts = schemaValidators[name]!(value);
      if (node.success) expect(schemaAccepts, JSON.stringify(schemaValidators[name]!.errors)).toBe(true);
      else if (expressible(node.error.issues)) expect(schemaAccepts, JSON.stringify(node.error.issues)).toBe(false);
    });
  }

  test('refuse what the node refuses by a cross-field rule, and say what they leave to the node', () => {
    const submit = schemaValidators['cmd.submit']!;
    expect(submit({ queue: 'q', delay_ms: 5, run_at: '2030-01-01T00:00:00Z' })).toBe(false);
    expect(submit({ queue: 'q', id: 'c1', params: { a: 1 } })).toBe(true);
    expect(submit({ jobs: [{ queue: 'q', delay_ms: 5, run_at: '2030-01-01T00:00:00Z' }] })).toBe(false);
    expect(submit({ jobs: [{ queue: 'q', id: 'c1' }] })).toBe(false);
    const move = schemaValidators['cmd.move']!;
    expect(move({ job_id: 'j' })).toBe(false);
    expect(move({ job_id: 'j', before: 'a', after: 'b' })).toBe(false);
    expect(move({ job_id: 'j', after: 'b' })).toBe(true);
    expect(JSON.stringify(generated['job-spec'])).toContain('at most 65536 bytes as JSON text (UTF-8): checked by the node, not expressed by this schema');
    expect(JSON.stringify(generated['work.complete'])).toContain('nested at most 64 deep');
  });
});
