/**
 * Which jobs one claim takes: the queue order from its head, within the room the queue's limits
 * leave, jobs of a held concurrency_key skipped (they keep their places), and no more than the
 * claim's reply can carry. Synchronous: the dispatcher appends the claims afterwards. A pure
 * function of the order, the gate and the jobs, so a property test can hold it to a model.
 */
import type { QueueOrder } from '../projections/queue-order.js';
import type { JobContext } from '../../machines/index.js';
import type { FlowGate, Hold } from './flow-gate.js';
import type { ParkedKeys } from './parked-keys.js';

/** A claimed job's fields around its params and key, in JSON: ids, queue, counters, the fencing token. */
const CLAIMED_JOB_OVERHEAD_BYTES = 400;
/**
 * Jobs of held keys one claim looks past and puts back, when nothing parks them: beyond it the
 * claim waits for the next wake-up rather than scan a long backlog. The dispatcher parks them
 * instead (ParkedKeys), so a busy key's backlog is walked once per hold, not once per claim.
 */
export const MAX_SKIPPED_PER_CLAIM = 1_000;

/** What the selection reads of a job: the fields of its context the limits and the reply look at. */
export type ClaimableJob = Pick<JobContext, 'priority' | 'concurrency_key' | 'params' | 'key'>;

/** The size of a job's item in a claim's reply. */
function claimedBytesOf({ params, key }: ClaimableJob): number {
  return CLAIMED_JOB_OVERHEAD_BYTES + Buffer.byteLength(JSON.stringify(params)) + (key === null ? 0 : Buffer.byteLength(JSON.stringify(key)));
}

export interface Selection {
  readonly jobIds: string[];
  /** Each taken job's concurrency_key: `gate.settled(key)` once its claim lands or is refused. */
  readonly keys: (string | null)[];
  /** When a rate window that held jobs back moves on (ms), if one did. */
  readonly retryAtMs: number | undefined;
  /** The claim stopped at a job less urgent than its max_priority (left in its place). */
  readonly beyondPriority: boolean;
}

export interface SelectInput {
  readonly queue: string;
  readonly order: Pick<QueueOrder, 'take' | 'release'>;
  readonly gate: FlowGate;
  /** A job's context: a folded job's (the store), or one being submitted (the dispatcher's hand-off). */
  readonly jobOf: (jobId: string) => ClaimableJob | undefined;
  /** The most jobs the claim asks for. */
  readonly max: number;
  /** Only jobs at this priority or more urgent (populate --priority); undefined: any. */
  readonly maxPriority?: number | undefined;
  /** Bytes the claim's reply may carry. */
  readonly replyBudget: number;
  readonly nowMs: number;
  /** Where jobs of held keys go out of the scan until their key is freed; without it they are put back (up to MAX_SKIPPED_PER_CLAIM). */
  readonly parked?: ParkedKeys;
}

function rateRetry(hold: Hold | null, at: number | undefined): number | undefined {
  if (hold?.untilMs === undefined || (hold.reason !== 'rate' && hold.reason !== 'key_rate')) return at;
  return Math.min(at ?? Infinity, hold.untilMs);
}

/** Takes the jobs (marked taken in the order, counted in flight by the gate) or none when the queue is held. */
export function selectClaimable({ queue, order, gate, jobOf, max, maxPriority, replyBudget, nowMs, parked }: SelectInput): Selection {
  const allowed = gate.room(nowMs);
  if (allowed <= 0) return { jobIds: [], keys: [], retryAtMs: rateRetry(gate.queueHold(nowMs), undefined), beyondPriority: false };
  const limit = Math.min(max, allowed);
  const jobIds: string[] = [];
  const keys: (string | null)[] = [];
  const skipped: string[] = [];
  let retryAtMs: number | undefined;
  let beyondPriority = false;
  // A claim takes only as many jobs as its reply can carry, decided before anything is
  // appended: a claimed job that cannot be delivered would sit out its lease.
  let room = replyBudget;
  while (jobIds.length < limit) {
    const id = order.take(queue);
    if (id === undefined) break;
    const job = jobOf(id);
    // The order is by priority first: the first job beyond the claim's priority ends its scan.
    if (maxPriority !== undefined && job !== undefined && job.priority > maxPriority) {
      order.release(queue, id);
      beyondPriority = true;
      break;
    }
    const key = job?.concurrency_key ?? null;
    const keyHold = gate.keyHold(key, nowMs);
    if (keyHold !== null) {
      retryAtMs = rateRetry(keyHold, retryAtMs);
      if (parked !== undefined && key !== null) {
        parked.park(key, id, keyHold.reason === 'key_rate' ? keyHold.untilMs : undefined);
        continue;
      }
      skipped.push(id);
      if (skipped.length >= MAX_SKIPPED_PER_CLAIM) break;
      continue;
    }
    const bytes = job === undefined ? CLAIMED_JOB_OVERHEAD_BYTES : claimedBytesOf(job);
    if (jobIds.length > 0 && bytes > room) {
      order.release(queue, id);
      break;
    }
    room -= bytes;
    jobIds.push(id);
    keys.push(key);
    gate.taking(key);
  }
  // Jobs of held keys keep their places for the next claim.
  for (const id of skipped) order.release(queue, id);
  return { jobIds, keys, retryAtMs, beyondPriority };
}
