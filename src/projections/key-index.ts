/**
 * The key index: per (queue, key), the live jobs (normally at most one), the jobs still in the
 * views (not removed: what a job set's refresh plans over), how many jobs were ever created for
 * it (submits and retries alike: the generation of the next keyed job id), and the latest of
 * them. Every job of a key takes its id from (queue, key, generation), so a keyed submit and a
 * keyed retry racing on two nodes create the same id, and one of them wins.
 *
 * A queue's keys are numbered in the order they were first seen (their slot); an entry is never
 * dropped, so a slot names the same key for the node's lifetime. A refresh looks its source's
 * keys up once while it reads them and plans on the slots (src/jobsets/plan.ts KeyedJobs): by
 * their values (src/jobsets/key-table.ts, which holds each slot's first key object), so a key
 * that has a job needs no identity string built.
 */
import { isLiveStatus } from '../../machines/index.js';
import { keyIdentity } from '../jobsets/key.js';
import { KeyTable } from '../jobsets/key-table.js';
import type { JobChange } from '../store/job-store.js';

export interface KeyEntry {
  /** canonicalJson of the key (src/jobsets/key.ts keyIdentity). */
  readonly identity: string;
  /** Its number among the queue's keys, from 0. */
  readonly slot: number;
  readonly live: Set<string>;
  /** The key's jobs not removed, in the order they were created (normally one). */
  readonly present: string[];
  generations: number;
  latest: { jobId: string; seq: number } | undefined;
}

/** One queue's keys: by identity, by slot, and by value (a source key's slot without its identity). */
export interface QueueKeys {
  readonly byIdentity: Map<string, KeyEntry>;
  readonly bySlot: KeyEntry[];
  readonly byValue: KeyTable;
}

export class KeyIndex {
  private readonly queues = new Map<string, QueueKeys>();

  readonly apply = (change: JobChange): void => {
    const ctx = change.after.state.job.context;
    if (ctx.key === null) return;
    const { queue, jobId } = change.after;
    const keys = this.keysOf(queue);
    const identity = keyIdentity(ctx.key);
    let entry = keys.byIdentity.get(identity);
    if (!entry) {
      entry = { identity, slot: keys.bySlot.length, live: new Set(), present: [], generations: 0, latest: undefined };
      keys.byIdentity.set(identity, entry);
      keys.bySlot.push(entry);
      keys.byValue.add(ctx.key, entry.slot);
    }
    const status = change.after.state.job.value;
    if (change.before === undefined) {
      entry.generations += 1;
      if (!entry.latest || change.after.submitSeq > entry.latest.seq) entry.latest = { jobId, seq: change.after.submitSeq };
      if (status !== 'removed') entry.present.push(jobId);
    } else if (status === 'removed' && change.before.state.job.value !== 'removed') {
      const at = entry.present.indexOf(jobId);
      if (at >= 0) entry.present.splice(at, 1);
    }
    if (isLiveStatus(status)) entry.live.add(jobId);
    else entry.live.delete(jobId);
  };

  private entry(queue: string, canonicalKey: string): KeyEntry | undefined {
    return this.queues.get(queue)?.byIdentity.get(canonicalKey);
  }

  /** A live job holding the key, if any. */
  liveJob(queue: string, canonicalKey: string): string | undefined {
    const entry = this.entry(queue, canonicalKey);
    if (!entry) return undefined;
    for (const jobId of entry.live) return jobId;
    return undefined;
  }

  /** How many jobs exist for the key: the next keyed id's generation. */
  generations(queue: string, canonicalKey: string): number {
    return this.entry(queue, canonicalKey)?.generations ?? 0;
  }

  /** The key's most recently created job (by stream sequence). */
  latestJob(queue: string, canonicalKey: string): string | undefined {
    return this.entry(queue, canonicalKey)?.latest?.jobId;
  }

  /** The queue's keys (live view: it grows as jobs of new keys are created). */
  keysOf(queue: string): QueueKeys {
    let keys = this.queues.get(queue);
    if (keys === undefined) {
      keys = { byIdentity: new Map(), bySlot: [], byValue: new KeyTable() };
      this.queues.set(queue, keys);
    }
    return keys;
  }
}
