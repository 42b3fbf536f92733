/**
 * The jobs every workload submits, docket's and BullMQ's alike, so both carry the same bytes;
 * and the chunked submit the docket rows and the side scripts share.
 */

/** The params of the i-th job. */
export function jobParams(i: number): { i: number; image: string } {
  return { i, image: `s3://uploads/${i}.jpg` };
}

/** Jobs `offset .. offset + n - 1` of `queue`, as docket's submitBatch takes them. */
export function docketJobs(queue: string, n: number, offset: number): { queue: string; params: { i: number; image: string } }[] {
  return Array.from({ length: n }, (_, i) => ({ queue, params: jobParams(offset + i) }));
}

/** What submitInChunks needs of a client (docket's Client, or the bench's dynamically loaded one). */
interface BatchSubmitter {
  submitBatch(jobs: readonly { queue: string; params: Record<string, unknown> }[]): Promise<{ jobs: readonly { ok: boolean; error?: unknown }[] }>;
}

/** Submits `n` jobs to `queue` in chunks, one chunk at a time; a refused submit is an error. */
export async function submitInChunks(client: BatchSubmitter, queue: string, n: number, chunk: number): Promise<void> {
  for (let offset = 0; offset < n; offset += chunk) {
    const { jobs } = await client.submitBatch(docketJobs(queue, Math.min(chunk, n - offset), offset));
    const refused = jobs.filter((j) => !j.ok);
    if (refused.length > 0) throw new Error(`${refused.length} of ${jobs.length} submits refused: ${JSON.stringify(refused[0]?.error)}`);
  }
}
