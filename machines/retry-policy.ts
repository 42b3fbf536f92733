/**
 * Retry policy, pure: whether a failed job gets a retry, and when. Jitter is derived from the job
 * id and attempt (no Math.random), so every node and every replay computes the same run_at.
 */
import type { BackoffPolicy, FailureReason, JobError } from './job.events.js';

/** Whether two backoff policies are the same policy (one object, or equal in every field). */
export function sameBackoff(a: BackoffPolicy, b: BackoffPolicy): boolean {
  return a === b || (a.base_ms === b.base_ms && a.max_ms === b.max_ms && a.jitter === b.jitter);
}

/** A failure gets an automatic retry unless the run was cancelled, the error said retryable:false, or attempts are used up. */
export function shouldRetry(input: {
  readonly reason: FailureReason | string | null;
  readonly error: JobError | null;
  readonly attempt: number;
  readonly max_attempts: number;
}): boolean {
  if (input.reason === 'cancelled') return false;
  if (input.error?.retryable === false) return false;
  return input.attempt < input.max_attempts;
}

/** FNV-1a: a small, stable string hash for deriving jitter (retries here, schedule ticks in schedule-timing.ts). */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/**
 * Delay before the retry of `attempt` (the attempt that failed, from 1): `base_ms * 2^(attempt-1)`
 * capped at `max_ms`, less up to `jitter` of it, the fraction derived from (jobId, attempt).
 */
export function backoffDelayMs(policy: BackoffPolicy, attempt: number, jobId: string): number {
  const exponential = Math.min(policy.max_ms, policy.base_ms * 2 ** Math.max(0, attempt - 1));
  const fraction = fnv1a(`${jobId}:${attempt}`) / 0xffffffff;
  return Math.round(exponential * (1 - policy.jitter * fraction));
}
