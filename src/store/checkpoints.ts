/**
 * Checkpoints: every job record and the stream sequence folded, written to a local file so a
 * restart folds only the tail of the log. A checkpoint is a cache: it is dropped when the machine
 * versions or the stream (its creation time) differ, and the log is folded from the start.
 * Written to a temporary file and renamed, so a crash mid-write leaves the previous one.
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { MACHINE_VERSIONS } from '../../machines/index.js';
import type { JobRecord } from './job-store.js';

const FORMAT = 1;

interface CheckpointFile {
  readonly format: number;
  readonly versions: typeof MACHINE_VERSIONS;
  readonly stream_created: string;
  readonly seq: number;
  readonly records: readonly JobRecord[];
}

export interface Checkpoint {
  readonly seq: number;
  readonly records: readonly JobRecord[];
}

export async function writeCheckpoint(path: string, streamCreated: string, seq: number, records: Iterable<JobRecord>): Promise<void> {
  const file: CheckpointFile = { format: FORMAT, versions: MACHINE_VERSIONS, stream_created: streamCreated, seq, records: [...records] };
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(file));
  await rename(tmp, path);
}

/** The checkpoint at `path` if it is usable for this stream and these machines; otherwise null. */
export async function readCheckpoint(path: string, streamCreated: string): Promise<Checkpoint | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    return null;
  }
  try {
    const file = JSON.parse(text) as CheckpointFile;
    if (file.format !== FORMAT || file.stream_created !== streamCreated) return null;
    if (JSON.stringify(file.versions) !== JSON.stringify(MACHINE_VERSIONS)) return null;
    return { seq: file.seq, records: file.records };
  } catch {
    return null;
  }
}
