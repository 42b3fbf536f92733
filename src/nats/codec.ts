/**
 * Commit encoding (log v2). Commits read from NATS are checked for shape before folding: an
 * unknown event type is silently ignored by XState at run time, so the codec names it here.
 */
import { hash } from 'node:crypto';
import { AGGREGATE_KINDS, COMMIT_VERSION, JOB_EVENT_TYPES, READ_COMMIT_VERSIONS, sameBackoff, SubmittedAbsent, type BackoffPolicy, type Commit, type Envelope, type JobEvent, type JobSubmittedData, type StoredSubmittedData } from '../../machines/index.js';

const JOB_TYPES = new Set<string>(JOB_EVENT_TYPES);
const KINDS = new Set<string>(AGGREGATE_KINDS);
const READ_VERSIONS = new Set<unknown>(READ_COMMIT_VERSIONS);

// ---------------------------------------------------------------------------------------------
// Commit format 3: a job.submitted without the fields that hold what their absence means

const ABSENT_FIELDS = Object.keys(SubmittedAbsent) as (keyof typeof SubmittedAbsent)[];
/** The fields a submit holds only when it has them: copied as they are. */
const SUBMITTED_OPTIONAL = ['concurrency_key', 'depends_on', 'template', 'schedule', 'fan_out'] as const satisfies readonly (keyof JobSubmittedData)[];
// A field added to JobSubmittedData and placed nowhere here would be lost from the log: this
// fails to compile until it is placed.
type Unplaced = Exclude<keyof JobSubmittedData, 'job_id' | 'params' | 'priority' | 'run_at' | keyof typeof SubmittedAbsent | (typeof SUBMITTED_OPTIONAL)[number]>;
const everyFieldPlaced: [Unplaced] extends [never] ? true : Unplaced = true;
void everyFieldPlaced;

function holdsAbsent(field: keyof typeof SubmittedAbsent, value: unknown): boolean {
  if (field !== 'backoff') return value === SubmittedAbsent[field];
  const b = value as BackoffPolicy | null;
  // Only a policy of exactly its three fields: one with more is stored as it is.
  return b !== null && typeof b === 'object' && sameBackoff(b, SubmittedAbsent.backoff) && Object.keys(b).length === 3;
}

/** A submit's data as stored (`time`: its event's time). */
export function compactSubmitted(data: JobSubmittedData, time: string): StoredSubmittedData {
  const out: Record<string, unknown> = { job_id: data.job_id, params: data.params, priority: data.priority };
  if (data.run_at !== time) out['run_at'] = data.run_at;
  for (const field of ABSENT_FIELDS) if (!holdsAbsent(field, data[field])) out[field] = data[field];
  for (const field of SUBMITTED_OPTIONAL) if (data[field] !== undefined) out[field] = data[field];
  return out as unknown as StoredSubmittedData;
}

/**
 * Puts a stored submit's absent fields back, in place (it is the reader's own parsed object).
 * Only `undefined` is filled: a stored null where a number belongs stays, for the audit to name.
 */
export function expandSubmitted(data: Record<string, unknown>, time: string): void {
  if (data['run_at'] === undefined) data['run_at'] = time;
  for (const field of ABSENT_FIELDS) if (data[field] === undefined) data[field] = SubmittedAbsent[field];
}

/**
 * Buffer.from, not TextEncoder: on Node 20 TextEncoder.encode allocates every array on its own;
 * Buffer.from takes small ones from its pool (`npx tsx bench/encode.ts`: 4.4-4.6 µs against
 * 2.0 µs per envelope).
 */
export function encodeJson(value: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(value));
}

/**
 * An event's JSON as the log stores it: a `job.submitted` without the fields that hold what their
 * absence means (machines/job.events.ts SubmittedAbsent), every other event as it is.
 * `decodeCommit` puts them back.
 */
export function encodeEvent(event: Envelope): string {
  return JSON.stringify(storedEvent(event));
}

function storedEvent(event: Envelope): Envelope {
  return event.type === 'job.submitted' ? { ...event, data: compactSubmitted(event.data as JobSubmittedData, event.time) } : event;
}

/** A commit as this code stores it: format COMMIT_VERSION, whatever version `commit` names. */
export function encodeCommit(commit: Omit<Commit, 'v'>): Uint8Array {
  return encodeJson({ v: COMMIT_VERSION, commit: commit.commit, partition: commit.partition, writer: commit.writer, prev_hash: commit.prev_hash, events: commit.events.map(storedEvent) });
}

/** The hash a partition's next commit carries as `prev_hash`: SHA-256 of this payload as stored. */
export function commitHash(payload: Uint8Array): string {
  return hash('sha256', payload, 'hex');
}

/** commitHash's 32 bytes (what a packed batch carries). */
export function commitDigest(payload: Uint8Array): Buffer {
  return hash('sha256', payload, 'buffer');
}

export class UndecodableEventError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UndecodableEventError';
  }
}

function text(bytes: Uint8Array): string {
  // The transport hands Buffers; wrapping one again is an allocation per commit for nothing.
  return bytes instanceof Buffer ? bytes.toString('utf8') : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Parses a commit; throws UndecodableEventError for anything that is not one. Events are
 * checked by `envelopeProblem` one by one where they are folded, so one bad event does not
 * hide the others of its commit.
 */
export function decodeCommit(bytes: Uint8Array): Commit {
  let value: unknown;
  try {
    value = JSON.parse(text(bytes));
  } catch {
    throw new UndecodableEventError('commit is not JSON');
  }
  if (!isObject(value)) throw new UndecodableEventError('commit is not an object');
  if (!READ_VERSIONS.has(value['v'])) throw new UndecodableEventError(`unknown commit version ${String(value['v'])}`);
  if (typeof value['commit'] !== 'string' || typeof value['partition'] !== 'string') throw new UndecodableEventError('commit lacks its id or partition');
  const writer = value['writer'];
  if (!isObject(writer) || typeof writer['node'] !== 'string' || typeof writer['epoch'] !== 'number') throw new UndecodableEventError('commit lacks its writer');
  if (!(value['prev_hash'] === null || typeof value['prev_hash'] === 'string')) throw new UndecodableEventError('commit prev_hash is not a string or null');
  const events = value['events'];
  if (!Array.isArray(events)) throw new UndecodableEventError('commit lacks events');
  // Format 2 stored submits whole, so filling changes nothing there; a field absent from one is
  // read as in format 3 (the schemas say the same of both). Shape is checked where each event is
  // folded; a submit only needs its data and time here.
  for (const event of events) {
    if (isObject(event) && event['type'] === 'job.submitted' && isObject(event['data']) && typeof event['time'] === 'string') expandSubmitted(event['data'], event['time']);
  }
  return value as unknown as Commit;
}

/** What is wrong with an event's envelope, or null when it is one. */
export function envelopeProblem(value: unknown): string | null {
  if (!isObject(value)) return 'event is not an object';
  if (typeof value['id'] !== 'string' || typeof value['type'] !== 'string' || typeof value['time'] !== 'string') return 'event lacks id, type or time';
  const aggregate = value['aggregate'];
  if (!isObject(aggregate) || typeof aggregate['id'] !== 'string' || typeof aggregate['kind'] !== 'string' || !KINDS.has(aggregate['kind'])) return 'event lacks its aggregate';
  if (!isObject(value['data'])) return 'event lacks data';
  if (!isObject(value['meta'])) return 'event lacks meta';
  return null;
}

export function isJobEvent(env: Envelope): env is JobEvent {
  return env.aggregate.kind === 'job' && JOB_TYPES.has(env.type);
}
