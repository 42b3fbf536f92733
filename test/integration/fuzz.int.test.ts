/**
 * Issue 12's fuzz test: hostile and malformed requests on every docket.cmd.* and docket.work.*
 * subject (and a leader's own inbox), against a real node on a real nats-server. Every request
 * must be answered, within the server's max payload, by a well-formed error or a correct
 * `ok: true`; an error must leave the stream where it was; the node must live to the end.
 *
 * Bodies: arbitrary JSON and bytes, invalid UTF-8, huge strings and keys near the payload limit,
 * deep nesting, commands with known fields holding wrong or hostile values (prototype keys
 * included), odd queue names and verbs in subjects. The server's max payload is 128 KiB, so
 * "near the limit" is cheap.
 *
 * Replay: a failure prints fast-check's seed and path. DOCKET_FUZZ_SEED fixes the seed,
 * DOCKET_FUZZ_RUNS the number of requests (default 3,000), DOCKET_FUZZ_MS the time budget.
 */
import fc from 'fast-check';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ErrorCodes } from '../../src/errors.js';
import { QUEUE_NAME, WORK_VERBS } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { closeTestFile, connectTestClients, lastSeq, startTrackedNode } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

const MAX_PAYLOAD = 128 * 1024;
const NUM_RUNS = Number(process.env['DOCKET_FUZZ_RUNS'] ?? 3_000);
const SEED = process.env['DOCKET_FUZZ_SEED'] === undefined ? undefined : Number(process.env['DOCKET_FUZZ_SEED']);
const BUDGET_MS = Number(process.env['DOCKET_FUZZ_MS'] ?? 45_000);
const NODE_NAME = 'fuzz-a';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer({ maxPayload: MAX_PAYLOAD });
  node = await startTrackedNode(server, { nodeName: NODE_NAME });
  ({ client, nc, jsm } = await connectTestClients(server, 'fuzz-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

// Queues jobs may be submitted to, and queues workers ask on: apart, so that no fuzzed claim
// takes a fuzzed job (its lease would lapse later and move the stream under another request).
const SUBMIT_QUEUES = ['fuzz-submit-0', 'fuzz-submit-1'];
const WORK_QUEUES = ['fuzz-work-0', 'fuzz-work-1'];

/** A subject token that is not a queue name (NATS itself refuses empty tokens, spaces and wildcards). */
const oddToken = fc
  .oneof(fc.string({ minLength: 1, maxLength: 80, unit: 'binary' }), fc.constantFrom('é', 'q😀', 'a'.repeat(65), '%', '$SYS', '-'.repeat(200)))
  .filter((s) => !QUEUE_NAME.test(s) && !/[\s.*>\u0000-\u001f\u007f]/.test(s) && s.length > 0);

const cmdVerbs = ['submit', 'cancel', 'retry', 'move', 'get', 'list', 'progress'] as const;

const subjectArb: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...cmdVerbs).map((v) => `docket.cmd.${v}`) },
  { weight: 1, arbitrary: oddToken.map((v) => `docket.cmd.${v}`) },
  { weight: 4, arbitrary: fc.tuple(fc.constantFrom(...WORK_QUEUES), fc.constantFrom(...WORK_VERBS)).map(([q, v]) => `docket.work.${q}.${v}`) },
  { weight: 1, arbitrary: fc.tuple(oddToken, fc.constantFrom(...WORK_VERBS)).map(([q, v]) => `docket.work.${q}.${v}`) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...WORK_QUEUES), oddToken).map(([q, v]) => `docket.work.${q}.${v}`) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...WORK_QUEUES, 'fuzz-never-led'), fc.constantFrom(...WORK_VERBS)).map(([q, v]) => `docket.leader.${NODE_NAME}.${q}.${v}`) },
);

/** Values a known field may get: right-looking, wrong, or hostile. */
const valueArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(...SUBMIT_QUEUES, 'a.b', '', 'é', null, -1, 0, 1, 255, 256, 1e308, 'r1', 'j1', '2026-01-01T00:00:00Z', true),
  fc.string({ unit: 'binary', maxLength: 50 }),
  fc.integer({ min: 0, max: 100 }),
  fc.array(fc.string({ maxLength: 10 }), { maxLength: 5 }),
);

const FIELDS = ['queue', 'job_id', 'run_id', 'id', 'jobs', 'params', 'key', 'priority', 'limit', 'cursor', 'status', 'worker', 'max', 'lease_ms', 'run_ids', 'progress', 'result', 'error', 'exit_code', 'next', 'before', 'after', 'delay_ms', 'run_at', 'max_attempts', 'backoff', 'reason', 'host', 'pid', 'version', '__proto__', 'constructor', 'prototype'];

/**
 * An object of known fields, written as JSON text by hand so that `__proto__` is an own key of
 * what the node parses. A claim's wait stays short: a long poll is not what is fuzzed here.
 */
const commandArb: fc.Arbitrary<string> = fc
  .array(fc.tuple(fc.constantFrom(...FIELDS), valueArb), { maxLength: 8 })
  .chain((entries) => fc.constantFrom(0, 10).map((wait) => [...entries, ['wait_ms', wait] as [string, unknown]]))
  .map((entries) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v ?? null)}`).join(',')}}`);

/** A batch whose items are such objects. */
const batchArb: fc.Arbitrary<string> = fc.array(commandArb, { minLength: 1, maxLength: 20 }).map((items) => `{"jobs":[${items.join(',')}]}`);

/**
 * Bodies shaped like real commands of every verb (most fields right, some not), so the fuzz
 * also reaches past validation: submits that create jobs, lists, claims that find nothing.
 */
const idLike = fc.oneof(fc.constantFrom('j1', 'r1', 'c0ffee'), fc.stringMatching(/^[A-Za-z0-9_-]{1,130}$/));
const small = fc.jsonValue({ maxDepth: 2 });
const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });
const submitTemplate = fc.record({ queue: fc.constantFrom(...SUBMIT_QUEUES), params: optional(fc.dictionary(fc.string({ maxLength: 8 }), small, { maxKeys: 4 })), priority: optional(fc.integer({ min: -1, max: 256 })), key: optional(fc.oneof(fc.string({ maxLength: 20 }), fc.constant({ id: 1 }))), delay_ms: optional(fc.integer({ min: -1, max: 1_000 })), max_attempts: optional(fc.integer({ min: 0, max: 1_001 })) });
const jobTemplate = fc.record({ job_id: idLike, id: optional(fc.string({ maxLength: 20 })), reason: optional(fc.string({ maxLength: 20 })) });
/** A body shaped for each verb. */
const templates: Record<string, fc.Arbitrary<unknown>> = {
  submit: fc.oneof(submitTemplate, fc.record({ jobs: fc.array(submitTemplate, { minLength: 1, maxLength: 5 }) })),
  cancel: jobTemplate,
  retry: jobTemplate,
  get: jobTemplate,
  move: fc.record({ job_id: idLike, priority: optional(fc.integer({ min: 0, max: 255 })), before: optional(idLike) }),
  list: fc.record({ queue: fc.constantFrom(...SUBMIT_QUEUES, ...WORK_QUEUES), status: optional(fc.constantFrom('queued', 'running', 'done')), limit: optional(fc.integer({ min: 0, max: 1_001 })), cursor: optional(fc.constantFrom('0', '1', 'x', '99999999999999999999')) }),
  progress: fc.record({ queue: optional(fc.constantFrom(...SUBMIT_QUEUES, 'a.b')) }),
  claim: fc.record({ worker: fc.string({ maxLength: 20 }), max: optional(fc.integer({ min: 0, max: 1_001 })), wait_ms: optional(fc.constantFrom(0, 10)), lease_ms: optional(fc.integer({ min: 0, max: 100_000 })) }),
  heartbeat: fc.record({ run_ids: fc.array(idLike, { maxLength: 5 }), progress: optional(fc.dictionary(idLike, small, { maxKeys: 3 })) }),
  complete: fc.record({ run_id: idLike, job_id: idLike, result: optional(small) }),
  fail: fc.record({ run_id: idLike, job_id: idLike, error: fc.record({ message: fc.string({ maxLength: 20 }), stack: optional(fc.string({ maxLength: 20 })) }) }),
};
/** A subject and a body shaped for its verb. */
const matchedArb: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.constantFrom(...cmdVerbs).chain((verb) => templates[verb]!.map((body): [string, string] => [`docket.cmd.${verb}`, JSON.stringify(body)])),
  fc.tuple(fc.constantFrom(...WORK_QUEUES), fc.constantFrom(...WORK_VERBS)).chain(([queue, verb]) => templates[verb]!.map((body): [string, string] => [`docket.work.${queue}.${verb}`, JSON.stringify(body)])),
);

const nearLimit = fc.integer({ min: MAX_PAYLOAD - 4_096, max: MAX_PAYLOAD - 64 });

const sizeOf = (body: string | Uint8Array) => (typeof body === 'string' ? Buffer.byteLength(body) : body.length);

/** Bodies the server takes (a bigger one never leaves the client: nats.js refuses to send it). */
const bodyArb: fc.Arbitrary<string | Uint8Array> = fc.oneof(
  { weight: 6, arbitrary: commandArb },
  { weight: 2, arbitrary: batchArb },
  { weight: 2, arbitrary: fc.json({ maxDepth: 4 }) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }) },
  // Valid JSON around bytes that are not UTF-8.
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 8 }).map((b) => Buffer.concat([Buffer.from(`{"queue":"${SUBMIT_QUEUES[0]}","params":{"s":"`), Buffer.from([0xff, ...b]), Buffer.from('"}}')])) },
  // Huge keys and strings, just under the server's max payload.
  { weight: 1, arbitrary: nearLimit.map((n) => `{${JSON.stringify('k'.repeat(n - 8))}:1}`) },
  { weight: 1, arbitrary: nearLimit.map((n) => JSON.stringify({ queue: SUBMIT_QUEUES[0], params: { s: 's'.repeat(n - 80) } })) },
  { weight: 1, arbitrary: nearLimit.map((n) => JSON.stringify({ worker: 'w', run_ids: ['r1'], progress: { r1: 'p'.repeat(n - 80) } })) },
  { weight: 1, arbitrary: nearLimit.map((n) => JSON.stringify({ run_id: 'r1', job_id: 'j1', result: 'r'.repeat(n - 80) })) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 8_000 }).map((n) => JSON.stringify({ jobs: Array.from({ length: n }, () => ({ queue: 'é' })) })) },
  // Deep nesting, bare and inside fields that take JSON.
  { weight: 1, arbitrary: fc.integer({ min: 60, max: 40_000 }).map((d) => `${'['.repeat(d)}${']'.repeat(d)}`) },
  { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 60, max: 20_000 }), fc.constantFrom('params', 'key', 'result', 'progress')).map(([d, f]) => `{"queue":"${SUBMIT_QUEUES[1]}","run_ids":[],${JSON.stringify(f)}:${'{"a":'.repeat(d)}1${'}'.repeat(d)}}`) },
).filter((body) => sizeOf(body) <= MAX_PAYLOAD);

const CODES = new Set<string>(Object.values(ErrorCodes));

type Reply = { ok: true } & Record<string, unknown>;

/** What an `ok: true` must carry, by verb. */
function expectCorrectOk(subject: string, reply: Reply): void {
  const verb = subject.split('.').at(-1);
  const has = (field: string, check: (v: unknown) => boolean) => expect(check(reply[field]), `${subject} ok reply field ${field}: ${JSON.stringify(reply).slice(0, 200)}`).toBe(true);
  if (subject.startsWith('docket.cmd.')) {
    if (verb === 'submit') return has(Array.isArray(reply['jobs']) ? 'jobs' : 'job_id', (v) => typeof v === 'string' || Array.isArray(v));
    if (verb === 'list') return has('jobs', Array.isArray);
    if (verb === 'progress') return has('queues', Array.isArray);
    if (verb === 'get') return has('job', (v) => v !== null && typeof v === 'object');
    return has('job_id', (v) => typeof v === 'string');
  }
  if (verb === 'claim') return has('jobs', (v) => Array.isArray(v) && v.length === 0);
  if (verb === 'heartbeat') return has('lost', Array.isArray);
  throw new Error(`${subject} answered ok to a fuzzed body: ${JSON.stringify(reply).slice(0, 200)}`);
}

test('fuzz: hostile requests on every subject get a bounded, well-formed answer, move nothing when refused, and never stop the node', async () => {
  let requests = 0;
  let accepted = 0;
  await fc.assert(
    fc.asyncProperty(fc.oneof({ weight: 3, arbitrary: fc.tuple(subjectArb, bodyArb) }, { weight: 1, arbitrary: matchedArb }), async ([subject, body]) => {
      const before = await lastSeq(jsm);
      const msg = await nc.request(subject, body, { timeout: 15_000 });
      requests += 1;
      expect(msg.data.length).toBeLessThanOrEqual(MAX_PAYLOAD);
      const reply = msg.json<Record<string, unknown>>();
      if (reply['ok'] === true) {
        expectCorrectOk(subject, reply as Reply);
        accepted += 1;
        return;
      }
      expect(Object.keys(reply).sort()).toEqual(['error', 'ok']);
      expect(reply['ok']).toBe(false);
      const error = reply['error'] as Record<string, unknown>;
      expect(CODES.has(String(error['code'])), JSON.stringify(error).slice(0, 300)).toBe(true);
      expect(typeof error['message']).toBe('string');
      expect((error['message'] as string).length).toBeLessThanOrEqual(2_048);
      // `unavailable` only where it is true: a leader's inbox for a queue it does not lead.
      if (error['code'] === 'unavailable') expect(subject, String(error['message'])).toMatch(/^docket\.leader\./);
      expect(await lastSeq(jsm)).toBe(before);
    }),
    {
      numRuns: NUM_RUNS,
      ...(SEED === undefined ? {} : { seed: SEED }),
      interruptAfterTimeLimit: BUDGET_MS,
      markInterruptAsFailure: false,
    },
  );
  expect(requests).toBeGreaterThan(Math.min(NUM_RUNS, 200));
  // Both sides of validation were reached, not only its front door.
  expect(accepted).toBeGreaterThan(0);
  expect(accepted).toBeLessThan(requests);
  // Alive and serving after all of it.
  expect(await client.submit({ queue: SUBMIT_QUEUES[0]!, params: { after: 'fuzz' } })).toMatchObject({ status: 'queued', created: true });
}, 90_000);
