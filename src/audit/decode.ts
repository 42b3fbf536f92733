/**
 * Decoding of stored messages for the audit and the replays, with a shape check of each job
 * event's data: XState ignores an unknown event and a guard reading a missing field just says
 * no, so an event of the wrong shape must be named here as undecodable, not later as illegal.
 * Hand-written checks (no schema library): this runs once per event of a million-event audit.
 */
import { FailureReasons, JOB_EVENT_TYPES, type Envelope, type JobEvent } from '../../machines/index.js';
import type { RecordedMessage } from './types.js';

const JOB_TYPES = new Set<string>(JOB_EVENT_TYPES);
const FAILURE_REASONS = new Set<string>(Object.values(FailureReasons));

export type DecodedMessage =
  | { readonly kind: 'job'; readonly queue: string; readonly jobId: string; readonly event: JobEvent }
  | { readonly kind: 'other'; readonly aggregateKind: string; readonly aggregateId: string; readonly event: Envelope }
  | { readonly kind: 'undecodable'; readonly aggregate: string; readonly reason: string };

function text(bytes: Uint8Array): string {
  // The transport hands Buffers; wrapping one again is an allocation per event for nothing.
  return bytes instanceof Buffer ? bytes.toString('utf8') : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

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
      return null;
    case 'job.artifact_added':
      if (!isString(d['run_id'])) return 'data.run_id is not a string';
      if (!isObject(d['artifact']) || !isString(d['artifact']['name'])) return 'data.artifact has no name';
      return null;
    case 'job.released':
    case 'job.cancelled':
    case 'job.ignored':
      return null;
    default:
      return `unknown job event type ${type}`;
  }
}

/** `job:<id>` for a job subject, `<kind>:<id>` for another docket subject, else the subject itself. */
export function aggregateOf(subject: string): string {
  const parts = subject.split('.');
  if (parts[0] !== 'docket' || parts[1] !== 'evt' || parts.length < 4) return subject;
  if (parts[2] === 'job' && parts.length === 5) return `job:${parts[4]}`;
  return `${parts[2]}:${parts.slice(3).join('.')}`;
}

function nameOf(isJobSubject: boolean, jobId: string, subject: string): string {
  return isJobSubject ? `job:${jobId}` : aggregateOf(subject);
}

/**
 * Decodes one stored message: a job event (shape-checked, on a well-formed job subject), an
 * envelope of another aggregate, or undecodable with the reason. Never throws.
 */
export function decodeMessage(message: RecordedMessage): DecodedMessage {
  const subject = message.subject;
  // Split by hand: this runs once per event of a million-event audit.
  let queue = '';
  let jobId = '';
  let isJobSubject = false;
  if (subject.startsWith('docket.evt.job.')) {
    const dot = subject.indexOf('.', 15);
    if (dot < 0 || dot === 15 || subject.indexOf('.', dot + 1) >= 0 || dot === subject.length - 1) {
      return { kind: 'undecodable', aggregate: subject, reason: `job subject ${subject} is not docket.evt.job.<queue>.<job_id>` };
    }
    queue = subject.slice(15, dot);
    jobId = subject.slice(dot + 1);
    isJobSubject = true;
  }
  // The aggregate's name is built only for a problem: this path runs once per event of a
  // million-event audit (and a closure here costs more than the fold).
  let value: unknown;
  try {
    value = JSON.parse(text(message.data));
  } catch {
    return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: 'the payload is not JSON' };
  }
  if (!isObject(value)) return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: 'the payload is not a JSON object' };
  if (value['v'] !== 1) return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: `unknown envelope version ${JSON.stringify(value['v'] ?? null)}` };
  const type = value['type'];
  const time = value['time'];
  // A time is parsed where a rule reads it (claims, submits); elsewhere it is only shown.
  if (!isString(value['id']) || !isString(type) || !isString(time) || time.length < 10) {
    return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: 'the envelope lacks id, type or a valid time' };
  }
  const data = value['data'];
  if (!isObject(data)) return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: 'the envelope lacks data' };
  if (!isJobSubject) {
    const parts = nameOf(isJobSubject, jobId, subject).split(':');
    return { kind: 'other', aggregateKind: parts[0] ?? '', aggregateId: parts.slice(1).join(':'), event: value as unknown as Envelope };
  }
  if (!JOB_TYPES.has(type)) return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: `${type} is not a job event type` };
  // The claim's time is compared with run_at (which the submit's shape check parses).
  if (type === 'job.claimed' && !isTime(time)) {
    return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: 'the envelope lacks id, type or a valid time' };
  }
  const problem = jobDataProblem(type, data);
  if (problem !== null) return { kind: 'undecodable', aggregate: nameOf(isJobSubject, jobId, subject), reason: `${type}: ${problem}` };
  return { kind: 'job', queue, jobId, event: value as unknown as JobEvent };
}
