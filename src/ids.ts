/**
 * Ids. Random ids come from an injectable source; derived ids are hashes of what identifies the
 * thing, so that repeating a command can never create a second aggregate (DESIGN: ids).
 * Every id is a single NATS subject token: [A-Za-z0-9_-].
 */
import { hash, randomFillSync } from 'node:crypto';

export interface IdSource {
  /** A fresh unique id (one subject token). */
  next(): string;
}

/** Random bytes drawn 4 KiB at a time: a fifth of randomUUID() and its dash removal, and jobs, runs and events take ids. */
const POOL_BYTES = 4096;
const ID_BYTES = 16;
const pool = Buffer.alloc(POOL_BYTES);
let poolOffset = POOL_BYTES;

/** 128 random bits as 32 lowercase hex characters. */
export const randomIds: IdSource = {
  next: () => {
    if (poolOffset === POOL_BYTES) {
      randomFillSync(pool);
      poolOffset = 0;
    }
    const id = pool.toString('hex', poolOffset, poolOffset + ID_BYTES);
    poolOffset += ID_BYTES;
    return id;
  },
};

/**
 * `prefix + body` as one flat string. A template literal of 13+ characters is a V8 cons string
 * (a pair of pointers to its parts), and ids are held once per job in memory: joining makes
 * one sequential string, about 30 bytes smaller per id.
 */
export function prefixedId(prefix: string, body: string): string {
  return [prefix, body].join('');
}

/** Every event id starts with this (Nats-Msg-Id is the event id). */
const EVENT_ID_PREFIX = 'e';

/** An event id derived from `body`: a random id, or a plain submit's job id (see job-store). */
export function eventIdOf(body: string): string {
  return prefixedId(EVENT_ID_PREFIX, body);
}

/** Whether `eventId` is `eventIdOf(body)`, without building it. */
export function isEventIdOf(eventId: string, body: string): boolean {
  return eventId.length === body.length + EVENT_ID_PREFIX.length && eventId.startsWith(EVENT_ID_PREFIX) && eventId.endsWith(body);
}

/** SHA-256 of the parts, each ended by NUL, as 22 base64url characters (one-shot `hash`: a fraction of a Hash object's cost, and ids are made per event). */
function digest(...parts: readonly string[]): string {
  return hash('sha256', `${parts.join('\u0000')}\u0000`, 'base64url').slice(0, 22);
}

/** A keyed job's id: one per (queue, key, generation); generation counts the key's earlier jobs. */
export function keyedJobId(queue: string, canonicalKey: string, generation: number): string {
  return prefixedId('k', digest('keyed', queue, canonicalKey, String(generation)));
}

/** An unkeyed job's id from the client's command id and its index in a batch. */
export function commandJobId(queue: string, commandId: string, index: number): string {
  return prefixedId('c', digest('command', queue, commandId, String(index)));
}

/**
 * A reservation's id: the queue's name, a dash, then 22 characters (from the command id when
 * there is one, so a resent reserve names the same reservation). The queue is read back from it.
 */
export function reservationId(queue: string, commandId: string | undefined, random: IdSource): string {
  return `${queue}-${commandId === undefined ? digest('reservation', random.next()) : digest('reservation', queue, commandId)}`;
}

/** The queue a reservation id names (see reservationId); null when it is not one. */
export function queueOfReservationId(reservationId: string): string | null {
  return reservationId.length > 23 && reservationId[reservationId.length - 23] === '-' ? reservationId.slice(0, -23) : null;
}

/** A group's id: from the command id when there is one (a resent create makes the same group). */
export function groupId(commandId: string | undefined, random: IdSource): string {
  return prefixedId('g', commandId === undefined ? random.next() : digest('group', commandId));
}

/** A group member's job id: one per (group, index), so a member can never be created twice. */
export function groupMemberJobId(group: string, index: number): string {
  return prefixedId('m', digest('group-member', group, String(index)));
}

/**
 * A fan-out job's entry for one node (kind `jobnode`): one per (job, node), so the submit that
 * creates them can never create two. `n` and 22 characters: no job id has that shape (random job
 * ids are hex; derived ones start with another letter).
 */
export function jobNodeId(jobId: string, node: string): string {
  return prefixedId('n', digest('jobnode', jobId, node));
}

/** Whether `id` has a job node id's shape (a cheap test before a lookup). */
export function isJobNodeIdShape(id: string): boolean {
  return id.length === 23 && id.charCodeAt(0) === 110;
}

/** A retry's id: one per (failed job, attempt), so the retry can never be created twice. */
export function retryJobId(failedJobId: string, attempt: number): string {
  return prefixedId('r', digest('retry', failedJobId, String(attempt)));
}

/**
 * A scheduled job's id: one per (schedule, tick), the tick as its ISO-8601 UTC string. A fire
 * resent after a crash (or by a second node that believes it leads) names the same job, which
 * the queue's writer creates once. A backfilled tick gets the same id as the cron's fire of it.
 */
export function scheduledJobId(schedule: string, tick: string): string {
  return prefixedId('s', digest('schedule', schedule, tick));
}

/** The job of a manual trigger: one per (schedule, trigger command id), so a resent trigger fires once. */
export function triggeredJobId(schedule: string, commandId: string): string {
  return prefixedId('t', digest('trigger', schedule, commandId));
}

/** The event id (and Nats-Msg-Id) of the event a command appends to one aggregate. */
export function eventIdFor(commandId: string, aggregateId: string, index = 0): string {
  return eventIdOf(digest('event', commandId, aggregateId, String(index)));
}

/** Canonical JSON (sorted keys) so that equal keys give equal ids. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** The hash a command's body is remembered by: a reused command id with another body is a conflict. */
export function commandHash(body: unknown): string {
  return digest('command-body', canonicalJson(body));
}
