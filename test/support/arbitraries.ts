/**
 * fast-check arbitraries for the events on a job's subject.
 *
 * Fully random events are almost all refused (a completion has to name the run that holds the
 * job, a claim has to come after `run_at`), so a property over them would mostly test refusals.
 * `jobEventSequenceArb` generates *plausible* histories instead: it usually starts with a submit,
 * times only move forward, run ids come from a pool of three, and a run reference is usually
 * "the run claimed last in this sequence". It still produces refusals on purpose: a second
 * submit, claims before `run_at`, claims while running, completions by another run id, events
 * after a terminal state, skips of a running job without its run id.
 */
import fc from 'fast-check';
import type { Json, JsonObject } from '../../machines/envelope.js';
import {
  FailureReasons,
  RemovalReasons,
  type Artifact,
  type FailureReason,
  type JobError,
  type JobEvent,
  type JobEventType,
} from '../../machines/job.events.js';

export const QUEUE = 'thumbnails';
export const JOB_ID = 'j1';
export const NODE = 'node-a';
/** The pool of run ids: small, so that completions often name the run that holds the job. */
export const RUN_IDS = ['r1', 'r2', 'r3'] as const;
/** Sequences start here; `at(ms)` is an ISO time `ms` after it. */
export const BASE_TIME_MS = Date.parse('2030-01-01T00:00:00.000Z');

export function at(offsetMs: number): string {
  return new Date(BASE_TIME_MS + offsetMs).toISOString();
}

export type JobEventOf<T extends JobEventType> = Extract<JobEvent, { type: T }>;
export type JobEventDataOf<T extends JobEventType> = JobEventOf<T>['data'];

export interface EnvelopeOptions {
  /** ISO time; `at(0)` by default. */
  readonly time?: string;
  readonly id?: string;
  readonly queue?: string;
  readonly node?: string;
}

let envelopeCounter = 0;

/** Wraps `data` in DESIGN's envelope `{ id, type, time, aggregate, queue, data, meta:{node} }`. */
export function jobEvent<T extends JobEventType>(type: T, data: JobEventDataOf<T>, options: EnvelopeOptions = {}): JobEventOf<T> {
  envelopeCounter += 1;
  const jobId = (data as { job_id?: unknown }).job_id;
  return {
    id: options.id ?? `evt-${envelopeCounter}`,
    type,
    time: options.time ?? at(0),
    aggregate: { kind: 'job', id: typeof jobId === 'string' ? jobId : 'job-1' },
    queue: options.queue ?? QUEUE,
    data,
    meta: { node: options.node ?? NODE },
  } as JobEventOf<T>;
}

// ---------------------------------------------------------------------------------------------
// Data shapes

const runIdArb = fc.constantFrom(...RUN_IDS);
const reasonArb: fc.Arbitrary<string | null> = fc.option(fc.constantFrom('no longer needed', 'duplicate', 'operator'), { nil: null });
const failureReasonArb: fc.Arbitrary<FailureReason> = fc.constantFrom(...Object.values(FailureReasons));
const priorityArb = fc.integer({ min: 0, max: 255 });
const positionArb = fc.integer({ min: -1000, max: 1000 });

const jsonLeafArb: fc.Arbitrary<Json> = fc.oneof(fc.constant(null), fc.boolean(), fc.integer({ min: -1000, max: 1000 }), fc.string({ maxLength: 8 }));
const jsonObjectArb: fc.Arbitrary<JsonObject> = fc.dictionary(fc.constantFrom('a', 'b', 'size', 'path'), jsonLeafArb, { maxKeys: 3 });
const resultArb: fc.Arbitrary<Json> = fc.oneof(jsonLeafArb, jsonObjectArb);

const jobErrorArb: fc.Arbitrary<JobError | null> = fc.option(
  fc
    .record({ message: fc.constantFrom('boom', 'timeout', 'ENOENT'), retryable: fc.option(fc.boolean(), { nil: undefined }) })
    .map(({ message, retryable }): JobError => (retryable === undefined ? { message } : { message, retryable })),
  { nil: null },
);

const exitCodeArb = fc.option(fc.integer({ min: 0, max: 255 }), { nil: undefined });

const artifactArb: fc.Arbitrary<Artifact> = fc
  .record({
    name: fc.constantFrom('thumb.png', 'log.txt', 'report.json'),
    uri: fc.option(fc.constantFrom('s3://bucket/a', 'file:///tmp/b'), { nil: undefined }),
    meta: fc.option(jsonObjectArb, { nil: undefined }),
  })
  .map(({ name, uri, meta }) => ({ name, ...(uri === undefined ? {} : { uri }), ...(meta === undefined ? {} : { meta }) }));

/** How an event names a run: the run claimed last in the sequence (plausible), or one from the pool. */
type RunRef = 'last' | (typeof RUN_IDS)[number];
const runRefArb: fc.Arbitrary<RunRef> = fc.oneof({ arbitrary: fc.constant('last' as const), weight: 3 }, { arbitrary: runIdArb, weight: 1 });

/**
 * One event before its time and run references are resolved. `runAtOffsetMs` is relative to the
 * submit's own time: up to 5 minutes in the future, so that early claims are refused.
 */
type EventSpec =
  | { readonly type: 'job.submitted'; readonly runAtOffsetMs: number; readonly data: Omit<JobEventDataOf<'job.submitted'>, 'run_at'> }
  | { readonly type: 'job.released' }
  | { readonly type: 'job.moved'; readonly data: JobEventDataOf<'job.moved'> }
  | { readonly type: 'job.claimed'; readonly data: JobEventDataOf<'job.claimed'> }
  | { readonly type: 'job.succeeded'; readonly run: RunRef; readonly result: Json; readonly exitCode: number | undefined }
  | { readonly type: 'job.failed'; readonly run: RunRef; readonly reason: FailureReason; readonly error: JobError | null; readonly exitCode: number | undefined }
  | { readonly type: 'job.cancelled'; readonly data: JobEventDataOf<'job.cancelled'> }
  | { readonly type: 'job.ignored'; readonly data: JobEventDataOf<'job.ignored'> }
  | { readonly type: 'job.skipped'; readonly run: RunRef | null; readonly reason: string | null }
  | { readonly type: 'job.artifact_added'; readonly run: RunRef; readonly artifact: Artifact }
  | { readonly type: 'job.removed'; readonly data: JobEventDataOf<'job.removed'> };

const submittedSpecArb: fc.Arbitrary<EventSpec> = fc
  .record({
    runAtOffsetMs: fc.oneof(
      { arbitrary: fc.constant(0), weight: 2 },
      { arbitrary: fc.integer({ min: -600, max: 0 }).map((s) => s * 1000), weight: 1 },
      { arbitrary: fc.integer({ min: 1, max: 300 }).map((s) => s * 1000), weight: 3 },
    ),
    key: fc.oneof(fc.constant(null), fc.constantFrom('k1', 'k2'), fc.record({ subject_id: fc.integer({ min: 1, max: 99 }), session: fc.integer({ min: 1, max: 5 }) })),
    params: jsonObjectArb,
    priority: fc.oneof(fc.constant(5), priorityArb),
    position: fc.oneof(fc.constant(0), positionArb),
    max_attempts: fc.integer({ min: 1, max: 5 }),
    backoff: fc.record({
      base_ms: fc.integer({ min: 0, max: 10_000 }),
      max_ms: fc.integer({ min: 0, max: 600_000 }),
      jitter: fc.integer({ min: 0, max: 100 }).map((n) => n / 100),
    }),
    retry: fc.option(fc.integer({ min: 1, max: 4 }), { nil: null }),
    waiting: fc.oneof({ arbitrary: fc.constant(false), weight: 2 }, { arbitrary: fc.constant(true), weight: 1 }),
  })
  .map(({ runAtOffsetMs, retry, ...rest }) => ({
    type: 'job.submitted' as const,
    runAtOffsetMs,
    data: { job_id: JOB_ID, attempt: retry === null ? 1 : retry + 1, retry_of: retry === null ? null : `j0-${retry}`, ...rest },
  }));

const claimedSpecArb: fc.Arbitrary<EventSpec> = fc
  .record({
    run_id: runIdArb,
    worker: fc.constantFrom('w1', 'w2'),
    host: fc.constantFrom('host-a', 'host-b'),
    pid: fc.integer({ min: 1, max: 65_535 }),
    version: fc.constantFrom('1.0.0', '1.1.0'),
    lease_ms: fc.constantFrom(5_000, 30_000, 60_000),
  })
  .map((data) => ({ type: 'job.claimed' as const, data }));

/** Weighted so that lifecycles get far: claims and artifacts often, ends of a queued job rarely. */
const specArb: fc.Arbitrary<EventSpec> = fc.oneof(
  { arbitrary: submittedSpecArb, weight: 1 },
  { arbitrary: fc.constant({ type: 'job.released' as const }), weight: 4 },
  { arbitrary: fc.record({ priority: priorityArb, position: positionArb }).map((data) => ({ type: 'job.moved' as const, data })), weight: 2 },
  { arbitrary: claimedSpecArb, weight: 8 },
  {
    arbitrary: fc
      .record({ run: runRefArb, result: resultArb, exitCode: exitCodeArb })
      .map((r) => ({ type: 'job.succeeded' as const, ...r })),
    weight: 3,
  },
  {
    arbitrary: fc
      .record({ run: runRefArb, reason: failureReasonArb, error: jobErrorArb, exitCode: exitCodeArb })
      .map((r) => ({ type: 'job.failed' as const, ...r })),
    weight: 3,
  },
  { arbitrary: reasonArb.map((reason) => ({ type: 'job.cancelled' as const, data: { reason } })), weight: 1 },
  { arbitrary: reasonArb.map((reason) => ({ type: 'job.ignored' as const, data: { reason } })), weight: 1 },
  {
    arbitrary: fc
      .record({ run: fc.option(runRefArb, { nil: null }), reason: reasonArb })
      .map((r) => ({ type: 'job.skipped' as const, ...r })),
    weight: 1,
  },
  {
    arbitrary: fc.record({ run: runRefArb, artifact: artifactArb }).map((r) => ({ type: 'job.artifact_added' as const, ...r })),
    weight: 5,
  },
  { arbitrary: fc.constantFrom(...RemovalReasons).map((reason) => ({ type: 'job.removed' as const, data: { reason } })), weight: 1 },
);

/** Builds the envelope of `spec` at `timeMs`; `lastRun` resolves the run reference 'last'. */
function buildEvent(spec: EventSpec, id: string, timeMs: number, lastRun: string): JobEvent {
  const options = { id, time: at(timeMs) };
  const runOf = (ref: RunRef): string => (ref === 'last' ? lastRun : ref);
  switch (spec.type) {
    case 'job.submitted':
      return jobEvent('job.submitted', { ...spec.data, run_at: at(timeMs + spec.runAtOffsetMs) }, options);
    case 'job.released':
      return jobEvent('job.released', {}, options);
    case 'job.moved':
      return jobEvent('job.moved', spec.data, options);
    case 'job.claimed':
      return jobEvent('job.claimed', spec.data, options);
    case 'job.succeeded':
      return jobEvent(
        'job.succeeded',
        { run_id: runOf(spec.run), result: spec.result, ...(spec.exitCode === undefined ? {} : { exit_code: spec.exitCode }) },
        options,
      );
    case 'job.failed':
      return jobEvent(
        'job.failed',
        { run_id: runOf(spec.run), reason: spec.reason, error: spec.error, ...(spec.exitCode === undefined ? {} : { exit_code: spec.exitCode }) },
        options,
      );
    case 'job.cancelled':
      return jobEvent('job.cancelled', spec.data, options);
    case 'job.ignored':
      return jobEvent('job.ignored', spec.data, options);
    case 'job.skipped':
      return jobEvent('job.skipped', { run_id: spec.run === null ? null : runOf(spec.run), reason: spec.reason }, options);
    case 'job.artifact_added':
      return jobEvent('job.artifact_added', { run_id: runOf(spec.run), artifact: spec.artifact }, options);
    case 'job.removed':
      return jobEvent('job.removed', spec.data, options);
    default: {
      const unhandled: never = spec;
      return unhandled;
    }
  }
}

/** Seconds between two events: often the same instant, otherwise up to two minutes. */
const gapMsArb = fc.oneof({ arbitrary: fc.constant(0), weight: 1 }, { arbitrary: fc.integer({ min: 1, max: 120 }).map((s) => s * 1000), weight: 4 });

/**
 * One event of any type, at any time in the first hour after `BASE_TIME_MS`, naming any run of
 * the pool. Mostly refused on its own; meant to be offered to a state reached by a sequence.
 */
export const jobEventArb: fc.Arbitrary<JobEvent> = fc
  .record({ spec: specArb, timeMs: fc.integer({ min: 0, max: 3600 }).map((s) => s * 1000), lastRun: runIdArb, n: fc.nat({ max: 9999 }) })
  .map(({ spec, timeMs, lastRun, n }) => buildEvent(spec, `evt-x${n}`, timeMs, lastRun));

export interface JobEventSequenceOptions {
  readonly maxLength?: number;
}

/**
 * A plausible history of one job's subject (up to 40 events by default): usually a submit first,
 * times non-decreasing from `BASE_TIME_MS`, event ids unique within the sequence, and run
 * references resolved against the last `job.claimed` generated so far (accepted or not).
 */
export function makeJobEventSequenceArb(options: JobEventSequenceOptions = {}): fc.Arbitrary<JobEvent[]> {
  const maxLength = options.maxLength ?? 40;
  return fc
    .record({
      first: fc.oneof({ arbitrary: submittedSpecArb, weight: 9 }, { arbitrary: specArb, weight: 1 }),
      rest: fc.array(fc.record({ gapMs: gapMsArb, spec: specArb }), { maxLength: maxLength - 1, size: 'max' }),
    })
    .map(({ first, rest }) => {
      const steps = [{ gapMs: 0, spec: first }, ...rest];
      const events: JobEvent[] = [];
      let timeMs = 0;
      let lastRun: string = RUN_IDS[0];
      for (const [index, step] of steps.entries()) {
        timeMs += step.gapMs;
        if (step.spec.type === 'job.claimed') lastRun = step.spec.data.run_id;
        events.push(buildEvent(step.spec, `evt-${index}`, timeMs, lastRun));
      }
      return events;
    });
}

/** `makeJobEventSequenceArb()`: plausible histories of up to 40 events. */
export const jobEventSequenceArb: fc.Arbitrary<JobEvent[]> = makeJobEventSequenceArb();
