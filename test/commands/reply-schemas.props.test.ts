/**
 * The shipped reply schemas (schemas/reply.<verb>.json, reply.error.json) against what the node
 * answers, with Ajv (draft 2020-12) as a client in another language would use them:
 * - get, list and progress: the node's query functions over a store folded from legal histories
 *   (test/support/audit-log.ts), whole and cut to a small reply budget (`truncated`);
 * - errors: what the node answers a request it refuses (validate + errorReply, as the command
 *   service does) on fast-check samples, and every error code;
 * - the write and worker verbs, which need a running node: replies typed with the node's own
 *   reply types (SubmitItemReply, ClaimedJob), shaped as README's tables give them.
 */
import { test as fcTest } from '@fast-check/vitest';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { JOB_STATUSES, positionOf } from '../../machines/index.js';
import { decodeStoredCommit } from '../../src/audit/decode.js';
import { errorReply } from '../../src/commands/reply.js';
import { getJob, listJobs, progressOf, type QueryContext } from '../../src/commands/queries.js';
import { replyJsonSchemas, replyOkSchemas } from '../../src/commands/reply-schemas.js';
import { BULK_VERBS, type BulkReply } from '../../src/commands/bulk-commands.js';
import { cancelSchema, claimSchema, completeSchema, failSchema, getSchema, listSchema, moveSchema, type ClaimedJob } from '../../src/commands/schemas.js';
import type { SubmitItemReply } from '../../src/commands/submit.js';
import { validate, validateSubmit } from '../../src/commands/validate.js';
import { DocketError, ErrorCodes, fromErrorBody, type ErrorCode } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { WORK_VERBS } from '../../src/nats/subjects.js';
import { Progress } from '../../src/projections/progress.js';
import { QueueIndex } from '../../src/projections/queue-index.js';
import { JobStore } from '../../src/store/job-store.js';
import { History, playSteps, recordLog, STEP_OPS, type Step } from '../support/audit-log.js';
import { closed } from '../support/json-schema.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 100);

const ajv = new Ajv2020({ strict: true, strictRequired: false });
addFormats.default(ajv);
const generated = replyJsonSchemas();
const v: Record<string, ValidateFunction> = Object.fromEntries(Object.entries(generated).map(([name, schema]) => [name, ajv.compile(schema)]));

// Closed copies: every field the node answers is documented.
const closedV: Record<string, ValidateFunction> = Object.fromEntries(
  Object.entries(generated).map(([name, schema]) => [name, ajv.compile({ ...(closed(schema) as Record<string, unknown>), $id: `closed:${name}` })]),
);

function accepts(name: string, reply: unknown): void {
  const value: unknown = JSON.parse(JSON.stringify(reply));
  expect(v[name]!(value), `${name}: ${JSON.stringify(v[name]!.errors)} on ${JSON.stringify(value).slice(0, 300)}`).toBe(true);
  expect(closedV[name]!(value), `${name} closed: ${JSON.stringify(closedV[name]!.errors)} on ${JSON.stringify(value).slice(0, 300)}`).toBe(true);
}

/** A query context over the jobs of a legal history, folded as the node folds the log. */
function queriesOf(steps: readonly Step[], budget?: number): QueryContext & { jobIds: string[]; queues: string[] } {
  const h = new History('r');
  playSteps(h, [{ op: 'submit', pick: 0, gapMs: 0 }, ...steps]);
  const store = new JobStore();
  const progress = new Progress();
  const queueIndex = new QueueIndex();
  store.onChange(progress.apply);
  store.onChange(queueIndex.apply);
  for (const message of recordLog(h.entries, 1, { eventsPerCommit: 3 }).messages) {
    const decoded = decodeStoredCommit(message);
    if (!decoded.ok) throw new Error(decoded.reason);
    decoded.events.forEach((e, index) => {
      if (e.kind === 'job') expect(store.apply({ seq: positionOf(message.seq, index), queue: e.queue, jobId: e.jobId, event: e.event })).toBe('applied');
    });
  }
  const jobIds = [...store.values()].map((r) => r.jobId);
  const queues = [...new Set([...store.values()].map((r) => r.queue))];
  return { store, progress, queueIndex, ...(budget === undefined ? {} : { replyBudget: () => budget }), jobIds, queues };
}

const stepArb: fc.Arbitrary<Step> = fc.record({ op: fc.constantFrom(...STEP_OPS), pick: fc.nat({ max: 1000 }), gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 90_000 })) });
const stepsArb = fc.array(stepArb, { minLength: 3, maxLength: 60 });

describe('the reply schemas accept what the node answers', () => {
  fcTest.prop([stepsArb, fc.option(fc.integer({ min: 200, max: 3000 }), { nil: undefined })], { numRuns })(
    'get, list and progress over a store folded from a legal history, whole or cut to the reply budget',
    (steps, budget) => {
      const ctx = queriesOf(steps, budget);
      expect(ctx.jobIds.length).toBeGreaterThan(0);
      for (const jobId of ctx.jobIds) accepts('reply.get', { ok: true, ...getJob(ctx, { job_id: jobId }) });
      for (const queue of ctx.queues) {
        for (const status of [undefined, ...JOB_STATUSES, 'delayed' as const]) {
          const page = listJobs(ctx, { queue, limit: 2, ...(status === undefined ? {} : { status }) });
          accepts('reply.list', { ok: true, ...page });
        }
        accepts('reply.progress', { ok: true, ...progressOf(ctx, { queue }) });
      }
      accepts('reply.progress', { ok: true, ...progressOf(ctx, {}) });
      // A job that does not exist: the error the node answers.
      let refused: unknown;
      try {
        getJob(ctx, { job_id: 'no-such-job' });
      } catch (err) {
        refused = errorReply(err, silentLogger);
      }
      accepts('reply.get', refused);
    },
  );

  test('a cut get and progress (truncated: true) are accepted', () => {
    const ctx = queriesOf(Array.from({ length: 30 }, (_, i) => ({ op: STEP_OPS[i % STEP_OPS.length]!, pick: i * 7, gapMs: 1000 })));
    // The job with the longest history, with room for about one entry of it.
    const full = ctx.jobIds.map((jobId) => getJob(ctx, { job_id: jobId })).sort((a, b) => b.history.length - a.history.length)[0]!;
    expect(full.history.length).toBeGreaterThan(2);
    const room = Buffer.byteLength(JSON.stringify({ job: full.job, run: full.run })) + 100;
    const detail = getJob({ ...ctx, replyBudget: () => room }, { job_id: full.job.job_id });
    const progress = progressOf({ ...ctx, replyBudget: () => 10 }, {});
    expect([('truncated' in detail && detail.truncated) === true, progress.truncated]).toEqual([true, true]);
    accepts('reply.get', { ok: true, ...detail });
    accepts('reply.progress', { ok: true, ...progress });
  });

  const anyJson = fc.jsonValue({ maxDepth: 3 });
  const REQUESTS = {
    submit: (body: unknown) => validateSubmit(body),
    cancel: (body: unknown) => validate(cancelSchema, body),
    get: (body: unknown) => validate(getSchema, body),
    list: (body: unknown) => validate(listSchema, body),
    move: (body: unknown) => validate(moveSchema, body),
    claim: (body: unknown) => validate(claimSchema, body),
    complete: (body: unknown) => validate(completeSchema, body),
    fail: (body: unknown) => validate(failSchema, body),
  } as const;
  const bodyArb = fc.oneof(anyJson, fc.record({ job_id: fc.oneof(fc.string(), anyJson), queue: fc.string(), run_id: fc.string(), worker: anyJson }, { requiredKeys: [] }));

  fcTest.prop([fc.constantFrom(...(Object.keys(REQUESTS) as (keyof typeof REQUESTS)[])), bodyArb], { numRuns })(
    'the error the node answers a refused request with (validate + errorReply) is accepted as reply.error and as the verb\'s reply',
    (verb, body) => {
      let reply: Record<string, unknown> | undefined;
      try {
        REQUESTS[verb](body);
      } catch (err) {
        expect(err).toBeInstanceOf(DocketError);
        reply = errorReply(err, silentLogger);
      }
      if (reply === undefined) return;
      expect(reply['ok']).toBe(false);
      accepts('reply.error', reply);
      accepts(`reply.${verb}`, reply);
    },
  );

  test('every error code, with and without details, and an unexpected error (unavailable)', () => {
    for (const code of Object.values(ErrorCodes)) {
      accepts('reply.error', errorReply(fromErrorBody({ code, message: `m ${code}` }), silentLogger));
      accepts('reply.cancel', errorReply(fromErrorBody({ code, message: 'm', details: { job_id: 'j1' } }), silentLogger));
    }
    accepts('reply.error', errorReply(new Error('boom'), silentLogger));
    expect(v['reply.error']!({ ok: false, error: { code: 'bogus' as ErrorCode, message: 'm' } })).toBe(false);
    expect(v['reply.error']!({ ok: false, error: { code: 'not_found' } })).toBe(false);
    expect(v['reply.error']!({ ok: true, error: { code: 'not_found', message: 'm' } })).toBe(false);
  });

  test('the write and worker verbs, shaped by the node\'s reply types and README', () => {
    const claimed: ClaimedJob = { job_id: 'j1', run_id: 'r1', queue: 'q', key: null, params: { a: 1 }, attempt: 1, max_attempts: 3, lease_ms: 30_000, fencing_token: positionOf(7, 2) };
    const items: SubmitItemReply[] = [
      { ok: true, job_id: 'j1', status: 'queued', created: true },
      { ok: false, error: { code: 'invalid_request', message: 'jobs.1.queue: must match [A-Za-z0-9_-]{1,64}' } },
    ];
    const { ok: _ok, ...one } = items[0] as Extract<SubmitItemReply, { ok: true }>;
    accepts('reply.submit', { ok: true, ...one });
    accepts('reply.submit', { ok: true, jobs: items });
    accepts('reply.cancel', { ok: true, job_id: 'j1', status: 'cancelled' });
    accepts('reply.retry', { ok: true, job_id: 'r2', status: 'queued', created: true, retry_of: 'j1' });
    accepts('reply.move', { ok: true, job_id: 'j1', status: 'queued', priority: 3, position: 12.5 });
    accepts('reply.promote', { ok: true, job_id: 'j1', status: 'queued', run_at: '2030-01-01T00:00:00.000Z' });
    accepts('reply.claim', { ok: true, jobs: [claimed] });
    accepts('reply.heartbeat', { ok: true, lost: ['r1'] });
    for (const verb of ['complete', 'fail'] as const) {
      accepts(`reply.${verb}`, { ok: true, job_id: 'j1', status: verb === 'complete' ? 'succeeded' : 'failed' });
      accepts(`reply.${verb}`, { ok: true, job_id: 'j1', status: 'succeeded', jobs: [claimed] });
      accepts(`reply.${verb}`, { ok: true, runs: [{ ok: true, job_id: 'j1', status: 'succeeded' }, { ok: false, job_id: 'j2', error: { code: 'stale_run', message: 'm' } }], jobs: [] });
    }
    for (const verb of ['retry_all', 'cancel_all', 'clean'] as const) {
      const reply: BulkReply = { count: 3, job_ids: ['j1', 'j2'], truncated: true };
      accepts(`reply.${verb}`, { ok: true, ...reply });
      accepts(`reply.${verb}`, { ok: true, count: 0, job_ids: [], dry_run: true });
      accepts(`reply.${verb}`, { ok: true, count: 1, job_ids: ['j1'], failed: 2, error: { code: 'unavailable', message: 'm' } });
      expect(v[`reply.${verb}`]!({ ok: true, count: -1, job_ids: [] })).toBe(false);
      expect(v[`reply.${verb}`]!({ ok: true, count: 1, job_ids: 'j1' })).toBe(false);
    }
    // And refuse what no node answers.
    expect(v['reply.cancel']!({ ok: true, job_id: 'j1', status: 'bogus' })).toBe(false);
    expect(v['reply.cancel']!({ ok: true, status: 'queued' })).toBe(false);
    expect(v['reply.claim']!({ ok: true, jobs: [{ ...claimed, fencing_token: 'x' }] })).toBe(false);
    expect(v['reply.submit']!({ job_id: 'j1', status: 'queued', created: true })).toBe(false);
    expect(v['reply.heartbeat']!({ ok: true, lost: 'r1' })).toBe(false);
  });

  test('there is a reply schema for every command verb the README lists and every worker verb', () => {
    const verbs = ['submit', 'cancel', 'get', 'list', 'progress', 'retry', 'move', 'promote', ...BULK_VERBS, ...WORK_VERBS];
    expect(Object.keys(replyOkSchemas).sort()).toEqual([...verbs].sort());
    expect(Object.keys(generated).sort()).toEqual(['reply.error', ...verbs.map((verb) => `reply.${verb}`)].sort());
  });
});
