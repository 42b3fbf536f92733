/**
 * A synthetic but valid job log: `jobs` jobs x 8 events each, interleaved in stream order the way
 * a busy queue writes them (a window of 1,000 jobs moves through its lifecycle together). Every
 * event is a v2 envelope the Job and JobRun machines accept; 1 job in 10 fails instead of
 * succeeding, and each run appends artifacts, one of them after the run closed (seed 002 INV-002).
 * `CommitChain` packs them into log v2 commits of the queue's partition, chained by prev_hash.
 */
import { createHash } from 'node:crypto';
import type { JobEvent } from '../../machines/index.js';
import { encodeCommit } from '../../src/nats/codec.js';

export const EVENTS_PER_JOB = 8;
export const WINDOW = 1_000;
export const LOG_QUEUE = 'thumbnails';

const T0 = Date.UTC(2025, 0, 6, 9, 0, 0);
const META = { node: 'node-bench-1' } as const;
const BACKOFF = { base_ms: 1_000, max_ms: 60_000, jitter: 0.2 } as const;

/** 26 characters, like a ULID: a readable id of the same size as docket's. */
function ulidLike(prefix: string, n: number): string {
  return (prefix + n.toString(32).toUpperCase()).padStart(26, '0');
}

export function jobIdOf(job: number): string {
  return ulidLike('J', job);
}

/** The job's live subject (core NATS, not stored in log v2). */
export function subjectOf(job: number, queue = LOG_QUEUE): string {
  return `docket.evt.job.${queue}.${jobIdOf(job)}`;
}

/** The subject of a queue's partition: where its commits are stored. */
export function partitionSubjectOf(queue = LOG_QUEUE): string {
  return `docket.log.q.${queue}`;
}

/** Events per commit in the replay benchmarks: what a leader's group commit holds under load. */
export const EVENTS_PER_COMMIT = 100;

/** Builds one partition's commits in order, each naming the SHA-256 of the one before (DESIGN: prev_hash). */
export class CommitChain {
  private prevHash: string | null = null;
  private count = 0;
  constructor(
    readonly queue = LOG_QUEUE,
    private readonly node = 'node-bench-1',
  ) {}

  /** The next commit's payload as stored. */
  next(events: readonly JobEvent[]): Uint8Array {
    this.count += 1;
    // As a node stores it (a submit without the fields that hold their absent values).
    const payload = encodeCommit({ commit: `${this.node}-1-${this.count}`, partition: `q.${this.queue}`, writer: { node: this.node, epoch: 1 }, prev_hash: this.prevHash, events });
    this.prevHash = createHash('sha256').update(payload).digest('hex');
    return payload;
  }
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** The `k`-th event (0..7) of job `job`. */
export function jobEvent(job: number, k: number, queue = LOG_QUEUE): JobEvent {
  const job_id = jobIdOf(job);
  const run_id = ulidLike('R', job);
  const base = T0 + job * 7;
  const id = ulidLike('E', job * EVENTS_PER_JOB + k);
  const meta = { ...META, correlation_id: ulidLike('C', job) };
  const aggregate = { kind: 'job', id: job_id } as const;
  switch (k) {
    case 0:
      return {
        id, type: 'job.submitted', time: iso(base), aggregate, queue, meta,
        data: {
          job_id, key: null, params: { image: `s3://uploads/${job}.jpg`, sizes: [64, 256, 1024] },
          priority: 5, position: 0, run_at: iso(base), max_attempts: 3, backoff: BACKOFF,
          attempt: 1, retry_of: null, waiting: false,
        },
      };
    case 1:
      return { id, type: 'job.moved', time: iso(base + 50), aggregate, queue, meta, data: { priority: 3, position: 0 } };
    case 2:
      return {
        id, type: 'job.claimed', time: iso(base + 1_000), aggregate, queue, meta,
        data: { run_id, worker: 'worker-7', host: 'bench-host', pid: 4242, version: '1.4.2', lease_ms: 30_000 },
      };
    case 3:
    case 4:
    case 5:
    case 7:
      return {
        id, type: 'job.artifact_added', time: iso(base + 1_000 + k * 100), aggregate, queue, meta,
        data: { run_id, artifact: { name: `thumb-${k}.png`, uri: `s3://thumbs/${job}/${k}.png` } },
      };
    case 6:
      return job % 10 === 9
        ? {
          id, type: 'job.failed', time: iso(base + 1_700), aggregate, queue, meta,
          data: { run_id, reason: 'error', error: { message: 'decoder: truncated JPEG', retryable: true } },
        }
        : { id, type: 'job.succeeded', time: iso(base + 1_700), aggregate, queue, meta, data: { run_id, result: { thumbs: 3 } } };
    default:
      throw new Error(`no event ${k}`);
  }
}

/** Calls `emit` for every event of `jobs` jobs, in stream order. */
export function forEachEvent(jobs: number, emit: (job: number, k: number) => void): void {
  for (let start = 0; start < jobs; start += WINDOW) {
    const end = Math.min(jobs, start + WINDOW);
    for (let k = 0; k < EVENTS_PER_JOB; k++) for (let job = start; job < end; job++) emit(job, k);
  }
}
