/**
 * The key index: per (queue, key), the live jobs (normally at most one), how many jobs were ever
 * created for it (submits and retries alike: the generation of the next keyed job id), and the
 * latest of them. Every job of a key takes its id from (queue, key, generation), so a keyed
 * submit and a keyed retry racing on two nodes create the same id, and one of them wins.
 */
import { isLiveStatus } from '../../machines/index.js';
import { canonicalJson } from '../ids.js';
import type { JobChange } from '../store/job-store.js';

interface KeyEntry {
  readonly live: Set<string>;
  generations: number;
  latest: { jobId: string; seq: number } | undefined;
}

export function keyIndexKey(queue: string, canonicalKey: string): string {
  return `${queue}\u0000${canonicalKey}`;
}

export class KeyIndex {
  private readonly entries = new Map<string, KeyEntry>();

  readonly apply = (change: JobChange): void => {
    const ctx = change.after.state.job.context;
    if (ctx.key === null) return;
    const k = keyIndexKey(change.after.queue, canonicalJson(ctx.key));
    let entry = this.entries.get(k);
    if (!entry) {
      entry = { live: new Set(), generations: 0, latest: undefined };
      this.entries.set(k, entry);
    }
    if (change.before === undefined) {
      entry.generations += 1;
      if (!entry.latest || change.after.submitSeq > entry.latest.seq) entry.latest = { jobId: change.after.jobId, seq: change.after.submitSeq };
    }
    if (isLiveStatus(change.after.state.job.value)) entry.live.add(change.after.jobId);
    else entry.live.delete(change.after.jobId);
  };

  /** A live job holding the key, if any. */
  liveJob(queue: string, canonicalKey: string): string | undefined {
    const entry = this.entries.get(keyIndexKey(queue, canonicalKey));
    if (!entry) return undefined;
    for (const jobId of entry.live) return jobId;
    return undefined;
  }

  /** How many jobs exist for the key: the next keyed id's generation. */
  generations(queue: string, canonicalKey: string): number {
    return this.entries.get(keyIndexKey(queue, canonicalKey))?.generations ?? 0;
  }

  /** The key's most recently created job (by stream sequence). */
  latestJob(queue: string, canonicalKey: string): string | undefined {
    return this.entries.get(keyIndexKey(queue, canonicalKey))?.latest?.jobId;
  }
}
