/**
 * The log stores a job.submitted without the fields that hold what their absence means
 * (machines/job.events.ts SubmittedAbsent); every read puts them back. A round trip through the
 * stored bytes must give the event the node decided, field for field, whatever it holds.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { SubmittedAbsent, type Commit, type Envelope, type JobSubmittedData } from '../../machines/index.js';
import { decodeCommit, encodeCommit, encodeEvent } from '../../src/nats/codec.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);
const TIME = '2030-01-01T00:00:00.000Z';

/** Each field either at its absent value or not, so both sides of every rule are drawn. */
const dataArb: fc.Arbitrary<JobSubmittedData> = fc
  .record(
    {
      key: fc.oneof(fc.constant(null), fc.constant('k1'), fc.constant({ subject_id: 3 })),
      params: fc.dictionary(fc.constantFrom('a', 'b'), fc.oneof(fc.integer(), fc.constant(null)), { maxKeys: 2 }),
      priority: fc.oneof(fc.constant(5), fc.integer({ min: 0, max: 255 })),
      position: fc.oneof(fc.constant(null), fc.integer({ min: -5, max: 5 })),
      run_at: fc.oneof(fc.constant(TIME), fc.constant('2030-01-01T00:01:00.000Z')),
      max_attempts: fc.oneof(fc.constant(1), fc.integer({ min: 2, max: 5 })),
      backoff: fc.oneof(
        fc.constant(SubmittedAbsent.backoff),
        fc.constant({ base_ms: 1_000, max_ms: 3_600_000, jitter: 0.2 }),
        fc.record({ base_ms: fc.constantFrom(0, 1_000), max_ms: fc.constantFrom(3_600_000, 60_000), jitter: fc.constantFrom(0, 0.2) }),
      ),
      attempt: fc.oneof(fc.constant(1), fc.integer({ min: 2, max: 4 })),
      retry_of: fc.oneof(fc.constant(null), fc.constant('j0')),
      waiting: fc.boolean(),
      concurrency_key: fc.oneof(fc.constant(null), fc.constant('tenant-a')),
      depends_on: fc.constant(['j7']),
      template: fc.constant({ name: 't', revision: 2 }),
      schedule: fc.constant({ name: 's', tick: TIME, trigger: 'cron' as const }),
    },
    { requiredKeys: ['key', 'params', 'priority', 'position', 'run_at', 'max_attempts', 'backoff', 'attempt', 'retry_of', 'waiting'] },
  )
  .map((fields) => ({ job_id: 'j1', ...fields }));

function submitted(data: JobSubmittedData): Envelope {
  return { id: 'e1', type: 'job.submitted', time: TIME, aggregate: { kind: 'job', id: 'j1' }, queue: 'q', data, meta: { node: 'n' } };
}

function commitOf(events: Envelope[]): Commit {
  return { v: 2, commit: 'c1', partition: 'q.q', writer: { node: 'n', epoch: 1 }, prev_hash: null, events };
}

describe('a stored job.submitted', () => {
  fcTest.prop([dataArb], { numRuns })('reads back as the event the node decided', (data) => {
    const event = submitted(data);
    const read = decodeCommit(encodeCommit(commitOf([event])));
    expect(read.events[0]).toEqual(event);
  });

  fcTest.prop([dataArb], { numRuns })('holds a field only when its value is not what its absence means', (data) => {
    const stored = JSON.parse(encodeEvent(submitted(data))) as { data: Record<string, unknown> };
    const absent = SubmittedAbsent as Record<string, unknown>;
    for (const field of Object.keys(absent)) {
      expect(field in stored.data, field).toBe(JSON.stringify(data[field as keyof JobSubmittedData]) !== JSON.stringify(absent[field]));
    }
    expect('run_at' in stored.data).toBe(data.run_at !== TIME);
  });

  test('a submit with every default is stored as its id, params and priority', () => {
    const data: JobSubmittedData = { job_id: 'j1', key: null, params: { n: 1 }, priority: 5, position: null, run_at: TIME, max_attempts: 1, backoff: { base_ms: 1_000, max_ms: 3_600_000, jitter: 0.2 }, attempt: 1, retry_of: null, waiting: false };
    expect(JSON.parse(encodeEvent(submitted(data))).data).toEqual({ job_id: 'j1', params: { n: 1 }, priority: 5 });
  });

  test('a submit stored whole (before the log left defaults out) reads the same', () => {
    const data: JobSubmittedData = { job_id: 'j1', key: 'k', params: {}, priority: 5, position: null, run_at: TIME, max_attempts: 1, backoff: { base_ms: 1_000, max_ms: 3_600_000, jitter: 0.2 }, attempt: 1, retry_of: null, waiting: false };
    const whole = Buffer.from(JSON.stringify(commitOf([submitted(data)])));
    expect(decodeCommit(whole).events[0]).toEqual(submitted(data));
  });

  test('a stored null where a number belongs stays null, for the audit to name', () => {
    const bad = Buffer.from(JSON.stringify(commitOf([{ ...submitted({} as JobSubmittedData), data: { job_id: 'j1', params: {}, priority: 5, max_attempts: null } }])));
    expect((decodeCommit(bad).events[0]!.data as Record<string, unknown>)['max_attempts']).toBeNull();
  });
});
