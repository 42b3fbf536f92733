/**
 * Reading an evicted job back from the log: its compact entry names the position of each of its
 * events, so its body is folded again from those commits alone (one direct read per commit,
 * never a scan of its partition).
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import { commitSeqOf, indexOf, type Position } from '../../machines/index.js';
import { decodeCommit, isJobEvent } from '../nats/codec.js';
import { STREAM } from '../nats/subjects.js';
import type { EvictedJob } from './evicted-index.js';
import { JobStore, type JobRecord } from './job-store.js';

/** Reads commits by stream sequence (injectable: tests and the CLI's replay read the same way). */
export type CommitReader = (seq: number) => Promise<Uint8Array>;

export function commitReader(jsm: JetStreamManager): CommitReader {
  return async (seq) => {
    const message = await jsm.streams.getMessage(STREAM, { seq });
    if (!message) throw new Error(`the log no longer holds commit ${seq}`);
    return message.data;
  };
}

/** The job's body as folded from its events at `positions`; throws when the log no longer holds them. */
export async function readEvictedJob(read: CommitReader, entry: Pick<EvictedJob, 'positions'>): Promise<JobRecord> {
  const store = new JobStore();
  const commits = new Map<number, Promise<Uint8Array>>();
  for (const position of entry.positions) {
    const seq = commitSeqOf(position);
    if (!commits.has(seq)) commits.set(seq, read(seq));
  }
  let jobId: string | undefined;
  for (const position of entry.positions) {
    const commit = decodeCommit(await commits.get(commitSeqOf(position))!);
    const event = commit.events[indexOf(position)];
    if (event === undefined || !isJobEvent(event) || event.queue === undefined || (jobId !== undefined && event.aggregate.id !== jobId)) {
      throw new Error(`the log holds no event of this job at position ${describe(position)}`);
    }
    jobId = event.aggregate.id;
    store.apply({ seq: position, queue: event.queue, jobId, event });
  }
  const record = jobId === undefined ? undefined : store.get(jobId);
  if (!record) throw new Error('an evicted job without events');
  return record;
}

function describe(position: Position): string {
  return `${commitSeqOf(position)}:${indexOf(position)}`;
}
