/** Waiting rules shared by the parts that wait on I/O: a bounded wait, and a doubling delay between tries. */

/** Waits for `work`, for at most `ms` (the timer does not hold the process open). */
export async function withinMs(ms: number, work: Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms).unref()))]);
  clearTimeout(timer);
}

/** `work`'s value, or `late()`'s once `ms` have passed without it (the timer does not hold the process open). */
export async function valueWithinMs<T>(ms: number, work: Promise<T>, late: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work, new Promise<T>((resolve) => (timer = setTimeout(() => resolve(late()), ms).unref()))]);
  } finally {
    clearTimeout(timer);
  }
}

export interface Doubling {
  readonly firstMs: number;
  readonly maxMs: number;
}

/** The wait before the next try after `failures` failures in a row (0: the first retry). */
export function doublingDelayMs(failures: number, { firstMs, maxMs }: Doubling): number {
  return Math.min(maxMs, firstMs * 2 ** failures);
}

/**
 * How long a background step that failed on NATS (restarting the tail's consumer, appending a
 * job's retry) waits before it tries again: nothing else would ask again, and an outage may last.
 */
export const TRY_AGAIN: Doubling = { firstMs: 1_000, maxMs: 30_000 };
