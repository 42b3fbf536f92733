/**
 * The shipped JSON Schemas of the log (schemas/commit.json, event.json, event.<type>.json,
 * live-event.json) against the node, with Ajv (draft 2020-12) as a client in another language
 * would use them:
 * - what the node writes is accepted: commits of legal histories as DOCKET holds them
 *   (test/support/audit-log.ts), job events of generated histories (test/support/arbitraries.ts)
 *   wrapped by the node's own `envelope()`, and live events built as the leader publishes them;
 *   the schemas closed (additionalProperties false) accept them too, so no field is undocumented;
 * - what the node's read path refuses (decodeCommit / envelopeProblem / jobDataProblem, through
 *   decodeStoredCommit and decodeEvent) is refused: every sample the schema accepts, mutated from
 *   real ones or any JSON, the read path decodes.
 */
import { test as fcTest } from '@fast-check/vitest';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { AGGREGATE_EVENT_TYPES, COMMIT_VERSION, JOB_EVENT_TYPES, positionOf, type JobEvent } from '../../machines/index.js';
import { decodeStoredCommit } from '../../src/audit/decode.js';
import { ManualClock } from '../../src/clock.js';
import { commandMetaOf, envelope } from '../../src/commands/handle-command.js';
import { eventJsonSchemas, eventSchema, jobEventSchemas } from '../../src/nats/event-schemas.js';
import { makeJobEventSequenceArb, BASE_TIME_MS } from '../support/arbitraries.js';
import { History, playSteps, recordLog, STEP_OPS, type Step } from '../support/audit-log.js';
import { closed } from '../support/json-schema.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 100);

type Json = { [key: string]: unknown };

const ajv = new Ajv2020({ strict: true, strictRequired: false });
addFormats.default(ajv);
const generated = eventJsonSchemas();

const v: Record<string, ValidateFunction> = Object.fromEntries(Object.entries(generated).map(([name, schema]) => [name, ajv.compile(schema)]));
// live-event is an allOf of the position and the event: closing its parts would refuse each other's fields.
const closedV: Record<string, ValidateFunction> = Object.fromEntries(
  Object.entries(generated)
    .filter(([name]) => name !== 'live-event')
    .map(([name, schema]) => [name, ajv.compile({ ...(closed(schema) as Json), $id: `closed:${name}` })]),
);

function accepts(name: string, value: unknown, closedToo = true): void {
  expect(v[name]!(value), `${name}: ${JSON.stringify(v[name]!.errors)}`).toBe(true);
  if (closedToo && closedV[name]) expect(closedV[name](value), `${name} closed: ${JSON.stringify(closedV[name].errors)}`).toBe(true);
}

/** As the leader publishes a live event (src/node.ts onCommitted): the stored JSON with its position in front. */
function liveEventOf(seq: number, index: number, eventJson: string): unknown {
  return JSON.parse(`{"position":{"seq":${seq},"index":${index}},${eventJson.slice(1)}`);
}

const stepArb: fc.Arbitrary<Step> = fc.record({ op: fc.constantFrom(...STEP_OPS), pick: fc.nat({ max: 1000 }), gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 90_000 })) });
const historyArb = fc.record({ steps: fc.array(stepArb, { minLength: 3, maxLength: 60 }), perCommit: fc.integer({ min: 1, max: 6 }) }).map(({ steps, perCommit }) => {
  const h = new History('s');
  // A submit first, so that every history has a commit.
  playSteps(h, [{ op: 'submit', pick: 0, gapMs: 0 }, ...steps]);
  return recordLog(h.entries, 1, { eventsPerCommit: perCommit }).messages;
});

/** Job events as the node builds them: the generated histories' data through `envelope()`, some with a command id. */
const nodeEventsArb = fc.tuple(makeJobEventSequenceArb({ maxLength: 15 }), fc.option(fc.string({ minLength: 1, maxLength: 20 }), { nil: undefined })).map(([events, commandId]) => {
  const clock = new ManualClock(BASE_TIME_MS);
  return events.map((e) => {
    // The node stamps the time from its clock.
    clock.set(Date.parse(e.time));
    return envelope({ node: 'node-a', clock }, e.type, { queue: e.queue ?? 'q', jobId: e.aggregate.id }, e.id, e.data as never, commandMetaOf(commandId, e.data)) as JobEvent;
  });
});

describe('the log schemas accept what the node writes', () => {
  fcTest.prop([historyArb], { numRuns })('commits of legal histories, their events and the live events published from them', (messages) => {
    expect(messages.length).toBeGreaterThan(0);
    for (const message of messages) {
      const commit = JSON.parse(Buffer.from(message.data).toString('utf8')) as { events: Json[] };
      // A real commit, as the read path sees it.
      const decoded = decodeStoredCommit(message);
      expect(decoded.ok && decoded.events.every((e) => e.kind === 'job')).toBe(true);
      accepts('commit', commit);
      commit.events.forEach((event, index) => {
        accepts('event', event);
        accepts(`event.${String(event['type'])}`, event);
        accepts('live-event', liveEventOf(message.seq, index, JSON.stringify(event)));
      });
    }
  });

  fcTest.prop([nodeEventsArb], { numRuns })('job events of every type built by envelope(), with and without a command id', (events) => {
    for (const event of events) {
      const value: unknown = JSON.parse(JSON.stringify(event));
      accepts('event', value);
      accepts(`event.${event.type}`, value);
      // The zod validators the files come from agree.
      expect(eventSchema.safeParse(value).success).toBe(true);
      expect(jobEventSchemas[event.type].safeParse(value).success).toBe(true);
    }
  });

  test('every job event type has its schema file, and event.json takes each type', () => {
    for (const type of JOB_EVENT_TYPES) expect(Object.keys(generated)).toContain(`event.${type}`);
    expect(Object.keys(generated).sort()).toEqual(['commit', 'event', 'live-event', ...[...JOB_EVENT_TYPES, ...AGGREGATE_EVENT_TYPES].map((t) => `event.${t}`)].sort());
  });
});

// ---------------------------------------------------------------------------------------------
// Refusals

const anyJson = fc.jsonValue({ maxDepth: 3 });
/** Paths of an event that the read path checks, and a few it does not. */
const EVENT_PATHS = [
  ['id'], ['type'], ['time'], ['aggregate'], ['aggregate', 'kind'], ['aggregate', 'id'], ['data'], ['meta'], ['queue'], ['meta', 'node'],
  ['data', 'job_id'], ['data', 'params'], ['data', 'priority'], ['data', 'position'], ['data', 'run_at'], ['data', 'max_attempts'], ['data', 'attempt'],
  ['data', 'retry_of'], ['data', 'waiting'], ['data', 'backoff'], ['data', 'key'], ['data', 'run_id'], ['data', 'worker'], ['data', 'lease_ms'],
  ['data', 'reason'], ['data', 'error'], ['data', 'error', 'message'], ['data', 'artifact'], ['data', 'artifact', 'name'], ['data', 'result'], ['data', 'extra'],
] as const;
const COMMIT_PATHS = [['v'], ['commit'], ['partition'], ['writer'], ['writer', 'node'], ['writer', 'epoch'], ['prev_hash'], ['events']] as const;

type Mutation = { readonly path: readonly string[]; readonly value: unknown; readonly remove: boolean };
const mutationArb = (paths: readonly (readonly string[])[]) =>
  fc.record({
    path: fc.constantFrom(...paths),
    value: fc.oneof(anyJson, fc.constantFrom('job.bogus', 'bogus', 'job', 'queue', '2030-13-01T00:00:00Z', '2030-01-01', '', -1, 1.5, 2, 256, null, {}, [])),
    remove: fc.boolean(),
  });

/** A deep copy of `value` with one field replaced or removed (nothing where the path does not reach). */
function mutate(value: unknown, { path, value: replacement, remove }: Mutation): unknown {
  const copy = JSON.parse(JSON.stringify(value)) as unknown;
  let at: unknown = copy;
  for (const key of path.slice(0, -1)) at = at !== null && typeof at === 'object' ? (at as Json)[key] : undefined;
  if (at === null || typeof at !== 'object' || Array.isArray(at)) return copy;
  const last = path[path.length - 1]!;
  if (remove) delete (at as Json)[last];
  else (at as Json)[last] = replacement;
  return copy;
}

const mutatedEventArb = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(nodeEventsArb, fc.nat(), fc.array(mutationArb(EVENT_PATHS), { minLength: 1, maxLength: 2 })).map(([events, i, ms]) => ms.reduce<unknown>((e, m) => mutate(e, m), events[i % events.length])) },
  { weight: 1, arbitrary: anyJson },
);

/** The read path as the log meets it: the event alone in a stored commit (decodeCommit fills a submit's absent fields), then decodeEvent. */
function readPathAccepts(event: unknown): boolean {
  const payload = Buffer.from(JSON.stringify({ v: COMMIT_VERSION, commit: 'c', partition: 'q.q', writer: { node: 'n', epoch: 1 }, prev_hash: null, events: [event] }));
  const decoded = decodeStoredCommit({ subject: 'docket.log.q.q', seq: 1, time: 0, msgId: 'c', expectedLastSubjectSeq: 0, data: payload });
  return decoded.ok && decoded.events[0]!.kind !== 'undecodable';
}

describe('the log schemas refuse what the read path refuses', () => {
  fcTest.prop([mutatedEventArb], { numRuns: numRuns * 3 })('an event the schema accepts (event.json, its event.<type>.json) is decoded by the read path', (event) => {
    const type = event !== null && typeof event === 'object' && 'type' in event ? String(event.type) : '';
    const byType = v[`event.${type}`];
    if (v['event']!(event)) expect(readPathAccepts(event), JSON.stringify(event)).toBe(true);
    if (byType?.(event)) expect(readPathAccepts(event), JSON.stringify(event)).toBe(true);
    // The node refuses it: so do the schemas.
    if (!readPathAccepts(event)) expect([v['event']!(event), byType?.(event) ?? false]).toEqual([false, false]);
  });

  fcTest.prop([mutatedEventArb, fc.nat({ max: 1000 }), fc.nat({ max: 65_535 })], { numRuns })('a live event the schema accepts is, without its position, an event the read path decodes', (event, seq, index) => {
    if (event === null || typeof event !== 'object' || Array.isArray(event)) return;
    const live = { position: { seq, index }, ...event };
    if (v['live-event']!(live)) {
      expect(seq).toBeGreaterThan(0);
      expect(readPathAccepts(event)).toBe(true);
    }
  });

  const mutatedCommitArb = fc
    .tuple(historyArb, fc.nat(), fc.array(fc.oneof(mutationArb(COMMIT_PATHS), fc.record({ index: fc.nat({ max: 5 }), m: mutationArb(EVENT_PATHS) })), { minLength: 1, maxLength: 2 }))
    .map(([messages, i, ms]) => {
      const message = messages[i % messages.length]!;
      let commit = JSON.parse(Buffer.from(message.data).toString('utf8')) as Json;
      for (const m of ms) {
        if ('m' in m) {
          const events = commit['events'];
          if (Array.isArray(events) && events.length > 0) events[m.index % events.length] = mutate(events[m.index % events.length], m.m);
        } else commit = mutate(commit, m) as Json;
      }
      return { ...message, data: Buffer.from(JSON.stringify(commit)) };
    });

  fcTest.prop([mutatedCommitArb], { numRuns })('a commit the schema accepts is decoded with every event by the read path; one it refuses is refused by the schema', (message) => {
    const decoded = decodeStoredCommit(message);
    const readOk = decoded.ok && decoded.events.every((e) => e.kind !== 'undecodable');
    const schemaOk = v['commit']!(JSON.parse(Buffer.from(message.data).toString('utf8')));
    if (schemaOk) expect(readOk, JSON.stringify(decoded)).toBe(true);
    if (!readOk) expect(schemaOk).toBe(false);
  });

  test('samples the read path refuses, one rule each, are refused by the schemas', () => {
    const [event] = fc.sample(nodeEventsArb.filter((es) => es.some((e) => e.type === 'job.submitted')), { numRuns: 1, seed: 7 })[0]!.filter((e) => e.type === 'job.submitted');
    const base = JSON.parse(JSON.stringify(event)) as Json;
    expect(readPathAccepts(base)).toBe(true);
    expect(v['event']!(base)).toBe(true);
    const bad: [string, unknown][] = [
      ['time', 'now'],
      ['type', 'job.bogus'],
      ['aggregate', { kind: 'bogus', id: 'j1' }],
      ['data', []],
      ['meta', null],
    ];
    for (const [field, value] of bad) {
      const sample = { ...base, [field]: value };
      expect(readPathAccepts(sample), field).toBe(false);
      expect(v['event']!(sample), field).toBe(false);
    }
    for (const [field, value] of [['run_at', 'soon'], ['priority', 1.5], ['params', 'x'], ['waiting', 'no'], ['key', 5]] as const) {
      const sample = { ...base, data: { ...(base['data'] as Json), [field]: value } };
      expect(readPathAccepts(sample), field).toBe(false);
      expect(v['event']!(sample), field).toBe(false);
      expect(v['event.job.submitted']!(sample), field).toBe(false);
    }
    // Open: a field a later version adds is accepted; the closed copy the tests use sees it as undocumented.
    const extra = { ...base, data: { ...(base['data'] as Json), added_later: 1 } };
    expect([readPathAccepts(extra), v['event']!(extra), closedV['event']!(extra)]).toEqual([true, true, false]);
    const failed = { ...base, type: 'job.failed', data: { run_id: 'r1', reason: 'oops', error: null } };
    expect(readPathAccepts(failed)).toBe(false);
    expect(v['event']!(failed)).toBe(false);
    expect(v['event']!({ ...failed, data: { ...failed.data, reason: 'lease_expired' } })).toBe(true);
    const commit = { v: 2, commit: 'c1', partition: 'q.q', writer: { node: 'n', epoch: 1 }, prev_hash: null, events: [base] };
    expect(v['commit']!(commit)).toBe(true);
    for (const [field, value] of [['v', 1], ['writer', { node: 'n' }], ['prev_hash', 5], ['events', {}], ['commit', 7]] as const) {
      const data = Buffer.from(JSON.stringify({ ...commit, [field]: value }));
      expect(decodeStoredCommit({ seq: 1, subject: 'docket.log.q.q', time: 0, msgId: 'c1', expectedLastSubjectSeq: 0, data }).ok, field).toBe(false);
      expect(v['commit']!({ ...commit, [field]: value }), field).toBe(false);
    }
  });

  test('say in their descriptions what JSON Schema cannot express', () => {
    const text = (name: string) => JSON.stringify(generated[name]);
    expect(text('commit')).toContain('hash chain');
    expect(text('event')).toContain('data.job_id of job.submitted equals aggregate.id');
    expect(text('event.job.submitted')).toContain('at most 65536 bytes of JSON text (UTF-8): checked by the command that wrote it, not expressed by this schema');
    expect(text('event.job.succeeded')).toContain('nested at most 64 deep');
    expect(text('live-event')).toContain("the subject names the event's queue and aggregate id");
  });
});

test('a live event has a position the node can give: seq from 1, index below 65536 (POSITION_SPAN)', () => {
  const event = JSON.parse(JSON.stringify(fc.sample(nodeEventsArb, { numRuns: 1, seed: 3 })[0]![0]!)) as Json;
  expect(v['live-event']!({ position: { seq: 3, index: 65_535 }, ...event })).toBe(true);
  expect(positionOf(3, 65_535)).toBeLessThan(positionOf(4, 0));
  expect(v['live-event']!({ position: { seq: 3, index: 65_536 }, ...event })).toBe(false);
  expect(v['live-event']!({ position: { seq: 0, index: 0 }, ...event })).toBe(false);
  expect(v['live-event']!(event)).toBe(false);
});
