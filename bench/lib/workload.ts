/**
 * The jobs every workload submits, docket's and BullMQ's alike, so both carry the same bytes;
 * and the chunked submit the docket rows and the side scripts share.
 */

/** The params of the i-th job. */
export function jobParams(i: number): { i: number; image: string } {
  return { i, image: `s3://uploads/${i}.jpg` };
}

/**
 * The concurrency_key of the i-th job when jobs are spread over `keys` keys: by a hash of i (a
 * 32-bit integer mix), so neighbours in the queue may share a key as tenants' jobs do, the same
 * for every run. Round robin would be the dispatcher's best case: a key's next job would come
 * `keys` places later, after its running job most likely ended.
 */
export function jobKey(i: number, keys: number): string {
  let h = Math.imul(i ^ (i >>> 16), 0x45d9f3b);
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b);
  h ^= h >>> 16;
  return `k${(h >>> 0) % keys}`;
}

/**
 * Jobs `offset .. offset + n - 1` of `queue`, as docket's submitBatch takes them; with `keys`,
 * each carries a concurrency_key (flow control) spread over that many keys by jobKey.
 */
export function docketJobs(queue: string, n: number, offset: number, keys?: number): { queue: string; params: { i: number; image: string }; concurrency_key?: string }[] {
  return Array.from({ length: n }, (_, i) => ({ queue, params: jobParams(offset + i), ...(keys === undefined ? {} : { concurrency_key: jobKey(offset + i, keys) }) }));
}

/** What submitInChunks needs of a client (docket's Client, or the bench's dynamically loaded one). */
interface BatchSubmitter {
  submitBatch(jobs: readonly { queue: string; params: Record<string, unknown>; concurrency_key?: string }[]): Promise<{ jobs: readonly { ok: boolean; error?: unknown }[] }>;
}

/** Submits `n` jobs to `queue` in chunks, one chunk at a time; a refused submit is an error. */
export async function submitInChunks(client: BatchSubmitter, queue: string, n: number, chunk: number, keys?: number): Promise<void> {
  for (let offset = 0; offset < n; offset += chunk) {
    const { jobs } = await client.submitBatch(docketJobs(queue, Math.min(chunk, n - offset), offset, keys));
    const refused = jobs.filter((j) => !j.ok);
    if (refused.length > 0) throw new Error(`${refused.length} of ${jobs.length} submits refused: ${JSON.stringify(refused[0]?.error)}`);
  }
}
