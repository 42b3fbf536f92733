/**
 * Decoding of stored commits for the audit and the replays: each commit is parsed once
 * (`decodeCommit`, one JSON.parse of the payload), then each of its events is checked for shape,
 * a job event's data field by field: XState ignores an unknown event and a guard reading a
 * missing field just says no, so an event of the wrong shape must be named here as undecodable,
 * not later as illegal. Hand-written checks (no schema library): this runs once per event of a
 * million-event audit. Never throws: an undecodable commit or event is a value.
 */
import { FailureReasons, JOB_EVENT_TYPES, RemovalReasons, type Commit, type Envelope, type JobEvent } from '../../machines/index.js';
import { decodeCommit, envelopeProblem, UndecodableEventError } from '../nats/codec.js';
import { parseLogSubject, queueOfPartition } from '../nats/subjects.js';
import { scheduleDataProblem, templateDataProblem } from '../schedules/decode.js';
import type { RecordedMessage } from './types.js';

const JOB_TYPES = new Set<string>(JOB_EVENT_TYPES);
const FAILURE_REASONS = new Set<string>(Object.values(FailureReasons));
const REMOVAL_REASONS = new Set<string>(RemovalReasons);

/** One event of a commit, decoded. `queue` is the queue of the partition the commit is stored in ('' for sys). */
export type DecodedEvent =
  | { readonly kind: 'job'; readonly queue: string; readonly jobId: string; readonly event: JobEvent }
  | { readonly kind: 'other'; readonly aggregateKind: string; readonly aggregateId: string; readonly event: Envelope }
  | { readonly kind: 'undecodable'; readonly aggregate: string; readonly reason: string };

/** A stored commit, decoded: its events in order, or why it is not a commit at all. */
export type DecodedCommit =
  | {
      readonly ok: true;
      readonly commit: Commit<Envelope>;
      /** The partition its subject names (the commit's own `partition` when the subject names none). */
      readonly partition: string;
      /** The partition's queue; '' for sys. */
      readonly queue: string;
      readonly events: readonly DecodedEvent[];
    }
  | { readonly ok: false; readonly partition: string | null; readonly reason: string };

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
const isString = (v: unknown): v is string => typeof v === 'string';
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isInt = (v: unknown): v is number => Number.isInteger(v);
const isStringOrNull = (v: unknown): boolean => v === null || typeof v === 'string';
const isTime = (v: unknown): boolean => typeof v === 'string' && Number.isFinite(Date.parse(v));

/** What is wrong with a job event's data, or null when its shape is what the machines read. */
export function jobDataProblem(type: string, d: Record<string, unknown>): string | null {
  switch (type) {
    case 'job.submitted':
      if (!isString(d['job_id'])) return 'data.job_id is not a string';
      if (!isObject(d['params'])) return 'data.params is not an object';
      if (!isInt(d['priority'])) return 'data.priority is not an integer';
      if (!(d['position'] === null || isNumber(d['position']))) return 'data.position is not a number or null';
      if (!isTime(d['run_at'])) return 'data.run_at is not a time';
      if (!isInt(d['max_attempts'])) return 'data.max_attempts is not an integer';
      if (!isInt(d['attempt'])) return 'data.attempt is not an integer';
      if (!isStringOrNull(d['retry_of'])) return 'data.retry_of is not a string or null';
      if (typeof d['waiting'] !== 'boolean') return 'data.waiting is not a boolean';
      if (!isObject(d['backoff'])) return 'data.backoff is not an object';
      if (!(d['key'] === null || isString(d['key']) || isObject(d['key']))) return 'data.key is not a string, object or null';
      return null;
    case 'job.claimed':
      if (!isString(d['run_id'])) return 'data.run_id is not a string';
      if (!isString(d['worker'])) return 'data.worker is not a string';
      if (!isNumber(d['lease_ms'])) return 'data.lease_ms is not a number';
      return null;
    case 'job.succeeded':
      return isString(d['run_id']) ? null : 'data.run_id is not a string';
    case 'job.failed':
      if (!isString(d['run_id'])) return 'data.run_id is not a string';
      if (!isString(d['reason']) || !FAILURE_REASONS.has(d['reason'])) return 'data.reason is not a failure reason';
      if (!(d['error'] === null || (isObject(d['error']) && isString(d['error']['message'])))) return 'data.error is not {message} or null';
      return null;
    case 'job.skipped':
      return isStringOrNull(d['run_id']) ? null : 'data.run_id is not a string or null';
    case 'job.moved':
      if (!isInt(d['priority'])) return 'data.priority is not an integer';
      if (!(d['position'] === null || isNumber(d['position']))) return 'data.position is not a number or null';
      if (d['run_at'] !== undefined && !isTime(d['run_at'])) return 'data.run_at is not a time';
      return null;
    case 'job.artifact_added':
      if (!isString(d['run_id'])) return 'data.run_id is not a string';
      if (!isObject(d['artifact']) || !isString(d['artifact']['name'])) return 'data.artifact has no name';
      return null;
    case 'job.removed':
      return isString(d['reason']) && REMOVAL_REASONS.has(d['reason']) ? null : 'data.reason is not a removal reason';
    case 'job.released':
    case 'job.cancelled':
    case 'job.ignored':
      return null;
    default:
      return `unknown job event type ${type}`;
  }
}

/** `<kind>:<id>` of an event's aggregate when it names one, else the partition's name. */
function nameOf(value: unknown, partition: string): string {
  if (isObject(value) && isObject(value['aggregate'])) {
    const { kind, id } = value['aggregate'];
    if (isString(kind) && isString(id)) return `${kind}:${id}`;
  }
  return `partition:${partition}`;
}

/**
 * Decodes one event of a commit stored in `partition` (whose queue is `queue`): a job event
 * (shape-checked), an envelope of another aggregate, or undecodable with the reason.
 */
export function decodeEvent(value: unknown, partition: string, queue: string): DecodedEvent {
  // The aggregate's name is built only for a problem: this runs once per event of a
  // million-event audit.
  const problem = envelopeProblem(value);
  if (problem !== null) return { kind: 'undecodable', aggregate: nameOf(value, partition), reason: problem };
  const env = value as unknown as Envelope;
  const { kind, id } = env.aggregate;
  if (kind === 'template' || kind === 'schedule') {
    // The planner and the guards read its times, crons and zones: a bad one is named here.
    const problem = (kind === 'template' ? templateDataProblem : scheduleDataProblem)(env.type, env.data as Record<string, unknown>);
    if (problem !== null) return { kind: 'undecodable', aggregate: `${kind}:${id}`, reason: `${env.type}: ${problem}` };
  }
  if (kind !== 'job') return { kind: 'other', aggregateKind: kind, aggregateId: id, event: env };
  const type = env.type;
  if (!JOB_TYPES.has(type)) return { kind: 'undecodable', aggregate: `job:${id}`, reason: `${type} is not a job event type` };
  // A time is parsed where a rule reads it (claims; submits' run_at); elsewhere it is only shown.
  if (env.time.length < 10 || (type === 'job.claimed' && !isTime(env.time))) {
    return { kind: 'undecodable', aggregate: `job:${id}`, reason: `${type}: the event's time is not a valid time` };
  }
  const dataProblem = jobDataProblem(type, env.data as Record<string, unknown>);
  if (dataProblem !== null) return { kind: 'undecodable', aggregate: `job:${id}`, reason: `${type}: ${dataProblem}` };
  return { kind: 'job', queue, jobId: id, event: env as JobEvent };
}

/**
 * Decodes one stored commit: its header checked, each event decoded on its own (one bad event
 * does not hide the others of its commit). The partition is the one the subject names, where
 * the commit is stored; the audit compares it with the commit's own `partition`.
 */
export function decodeStoredCommit(message: RecordedMessage): DecodedCommit {
  const fromSubject = parseLogSubject(message.subject);
  let commit: Commit<Envelope>;
  try {
    commit = decodeCommit(message.data);
  } catch (err) {
    return { ok: false, partition: fromSubject, reason: err instanceof UndecodableEventError ? err.message : String(err) };
  }
  const partition = fromSubject ?? commit.partition;
  const queue = queueOfPartition(partition);
  const raw = commit.events as readonly unknown[];
  const events: DecodedEvent[] = new Array<DecodedEvent>(raw.length);
  for (let i = 0; i < raw.length; i++) events[i] = decodeEvent(raw[i], partition, queue);
  return { ok: true, commit, partition, queue, events };
}

/** The name a violation gives a partition's own rules. */
export function partitionAggregate(partition: string | null, subject: string): string {
  return `partition:${partition ?? subject}`;
}
