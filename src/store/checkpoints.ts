/**
 * Checkpoints: every job record and the stream sequence folded, written to a local file so a
 * restart folds only the tail of the log. A checkpoint is a cache: it is dropped when the machine
 * versions or the stream (its creation time) differ, and the log is folded from the start.
 *
 * The file is JSON lines: a header, then one record per line. It is written in chunks that
 * yield to the event loop (one JSON.stringify of a million records would block the node for
 * seconds and hold the whole text in memory), to a temporary file renamed at the end, so a crash
 * mid-write leaves the previous checkpoint. Records are immutable and replaced on change, so a
 * record changed while writing is written either way; the tail replay from `seq` skips what a
 * newer record already holds (idempotent by the record's own sequence).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { once } from 'node:events';
import { MACHINE_VERSIONS } from '../../machines/index.js';
import type { JobRecord } from './job-store.js';

const FORMAT = 2;
/** Records per write: large enough to be fast, small enough not to stall commands. */
const CHUNK_RECORDS = 2_000;

interface CheckpointHeader {
  readonly format: number;
  readonly versions: typeof MACHINE_VERSIONS;
  readonly stream_created: string;
  readonly seq: number;
}

export interface Checkpoint {
  readonly seq: number;
  readonly records: readonly JobRecord[];
}

export async function writeCheckpoint(path: string, streamCreated: string, seq: number, records: Iterable<JobRecord>): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  const out = createWriteStream(tmp);
  try {
    const header: CheckpointHeader = { format: FORMAT, versions: MACHINE_VERSIONS, stream_created: streamCreated, seq };
    let chunk = `${JSON.stringify(header)}\n`;
    let count = 0;
    for (const record of records) {
      chunk += `${JSON.stringify(record)}\n`;
      if (++count % CHUNK_RECORDS === 0) {
        if (!out.write(chunk)) await once(out, 'drain');
        chunk = '';
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    out.end(chunk);
    await once(out, 'finish');
  } catch (err) {
    out.destroy();
    await rm(tmp, { force: true });
    throw err;
  }
  await rename(tmp, path);
}

/** The checkpoint at `path` if it is usable for this stream and these machines; otherwise null. */
export async function readCheckpoint(path: string, streamCreated: string): Promise<Checkpoint | null> {
  let lines: ReturnType<typeof createInterface>;
  try {
    const input = createReadStream(path, { encoding: 'utf8' });
    await once(input, 'open');
    lines = createInterface({ input, crlfDelay: Infinity });
  } catch {
    return null;
  }
  try {
    let header: CheckpointHeader | undefined;
    const records: JobRecord[] = [];
    for await (const line of lines) {
      if (line === '') continue;
      if (!header) {
        header = JSON.parse(line) as CheckpointHeader;
        if (header.format !== FORMAT || header.stream_created !== streamCreated) return null;
        if (JSON.stringify(header.versions) !== JSON.stringify(MACHINE_VERSIONS)) return null;
        continue;
      }
      records.push(JSON.parse(line) as JobRecord);
    }
    return header ? { seq: header.seq, records } : null;
  } catch {
    // A torn or foreign file: fold the log from the start instead.
    return null;
  } finally {
    lines.close();
  }
}
