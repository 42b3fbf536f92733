/**
 * Cold jobs: queued jobs restored from a checkpoint and not yet touched, held as the checkpoint
 * stored them (one JSON record line each, left in the file and read when needed) plus a few
 * columns in memory, instead of as objects. Restoring a million jobs as objects (parse, a Map
 * entry each, the queue-order heap) took ~3.5 s and most of it was garbage collection; this
 * restore is a read of the columns and a table build. A cold job becomes an object (is
 * materialised) the first time anything reads it: a claim, a `get`, a command on it. Until then
 * the projections know it from the columns: its queue and status (progress), its order key
 * (queue order), its submit sequence (list).
 *
 * Only jobs with nothing else to know go cold: queued, due when the node starts, unkeyed (the key
 * index holds every keyed job), without `depends_on`, and with no event after `job.submitted`
 * (flow counts read claim times from a record's history). Everything else is restored as objects.
 *
 * Ids are found by their 128-bit fingerprints (evicted-index.ts), stored in the checkpoint, in an
 * open-addressing table of typed arrays. A row leaves the cold set for good: materialised (its
 * object is in the job store) or superseded (a later checkpoint segment or the log changed it).
 */
import { closeSync, readSync } from 'node:fs';
import type { JobRecord } from './job-store.js';
import type { Fingerprint } from './evicted-index.js';

/**
 * Where the cold rows' record lines are read from. A line is read the first time its job is
 * (a claim, a `get`, a list of ids), so the lines need not be in memory: a million of them are
 * ~190 MB, and reading them all at start was most of a restart (on a VM that charges ~11 µs to
 * touch a fresh page of memory, 0.7 s of 1.1 s for a million jobs).
 */
export interface ColdBodies {
  /** Bytes [start, end) of the lines; valid until the next call (a block may be reused). */
  read(start: number, end: number): Buffer;
  /** Lets go of the file, if any; reads after it throw. */
  close(): void;
}

/** Bytes read at a time: a block holds a few hundred lines, read in queue order by claims. */
const BLOCK_BYTES = 64 * 1024;
/** Blocks kept: reads that walk several stretches at once (a list by submit order across priorities) each keep theirs. */
const BLOCKS = 8;

/**
 * Lines left in the checkpoint file, read in blocks through an open descriptor: a whole rewrite
 * renames a new file over it, and the descriptor still reads the old one. Reads are synchronous
 * (a materialised job is needed in the turn that asks) and from the page cache after a restart.
 */
export class FileBodies implements ColdBodies {
  private fd: number | undefined;
  /** Each holds bytes [start, start + used) of the lines; the least recently used is read over. */
  private readonly blocks: { start: number; bytes: Buffer; used: number; lastUse: number }[] = [];
  private tick = 0;

  constructor(
    fd: number,
    /** Where the lines start in the file. */
    private readonly offset: number,
    /** Their length in bytes. */
    private readonly length: number,
  ) {
    this.fd = fd;
  }

  read(start: number, end: number): Buffer {
    const tick = ++this.tick;
    for (const block of this.blocks) {
      if (start >= block.start && end <= block.start + block.used) {
        block.lastUse = tick;
        return block.bytes.subarray(start - block.start, end - block.start);
      }
    }
    if (this.fd === undefined) throw new Error('cold job lines read after the checkpoint file was closed');
    let block = this.blocks.length < BLOCKS ? undefined : this.blocks.reduce((a, b) => (b.lastUse < a.lastUse ? b : a));
    if (block === undefined) this.blocks.push((block = { start: 0, bytes: Buffer.allocUnsafe(BLOCK_BYTES), used: 0, lastUse: 0 }));
    const want = Math.min(Math.max(BLOCK_BYTES, end - start), this.length - start);
    if (block.bytes.length < want) block.bytes = Buffer.allocUnsafe(want);
    block.start = start;
    block.used = 0;
    while (block.used < want) {
      const n = readSync(this.fd, block.bytes, block.used, want - block.used, this.offset + start + block.used);
      if (n === 0) throw new Error(`checkpoint file ended inside its cold block (at ${this.offset + start + block.used})`);
      block.used += n;
    }
    block.lastUse = tick;
    return block.bytes.subarray(0, end - start);
  }

  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }
}

/** The columns of the cold rows, in the order the checkpoint's binary block holds them. */
export interface ColdColumns {
  /** Queue names, and per queue the range of its rows [start, end): rows are grouped by queue. */
  readonly queues: readonly string[];
  readonly ranges: readonly (readonly [number, number])[];
  /** Four 32-bit words per row: the fingerprint of the job id. */
  readonly fingerprints: Uint32Array;
  readonly priority: Float64Array;
  /** The queue-order position: the moved-to position, else the submit sequence. */
  readonly position: Float64Array;
  readonly submitSeq: Float64Array;
  readonly runAtMs: Float64Array;
  /** Row i's record line is bodies[bodyEnds[i - 1] ?? 0, bodyEnds[i]). */
  readonly bodyEnds: Uint32Array;
  readonly bodies: ColdBodies;
}

/** Parses one record line (checkpoints.ts owns the format). */
export type RecordDecoder = (line: string) => JobRecord;

/** A row's state: cold; materialised (an object now, the projections still know it from its row); left (superseded by a newer record, which the projections heard). */
const COLD = 1;
const MATERIALISED = 2;
const LEFT = 0;

export class ColdJobs {
  /** Each row's state (COLD, MATERIALISED, LEFT). */
  private readonly cold: Uint8Array;
  private left: number;
  private readonly slots: Uint32Array;
  private readonly queueOf: Uint32Array;

  constructor(
    readonly columns: ColdColumns,
    private readonly decode: RecordDecoder,
  ) {
    const n = columns.priority.length;
    this.cold = new Uint8Array(n).fill(COLD);
    this.left = n;
    let size = 16;
    while (size * 7 < n * 10) size *= 2;
    this.slots = new Uint32Array(size);
    const mask = size - 1;
    const w = columns.fingerprints;
    for (let row = 0; row < n; row++) {
      let s = w[row * 4]! & mask;
      while (this.slots[s] !== 0) s = (s + 1) & mask;
      this.slots[s] = row + 1;
    }
    this.queueOf = new Uint32Array(n);
    columns.ranges.forEach(([start, end], q) => this.queueOf.fill(q, start, end));
  }

  /** Rows in all, cold or not. */
  get rows(): number {
    return this.cold.length;
  }

  /** Rows still cold. */
  get size(): number {
    return this.left;
  }

  /** The row of a fingerprint, cold or not; -1 when none. */
  rowOf(fp: Fingerprint): number {
    if (this.cold.length === 0) return -1;
    const mask = this.slots.length - 1;
    const w = this.columns.fingerprints;
    for (let s = fp[0] & mask; ; s = (s + 1) & mask) {
      const slot = this.slots[s]!;
      if (slot === 0) return -1;
      const k = (slot - 1) * 4;
      if (w[k] === fp[0] && w[k + 1] === fp[1] && w[k + 2] === fp[2] && w[k + 3] === fp[3]) return slot - 1;
    }
  }

  isCold(row: number): boolean {
    return this.cold[row] === COLD;
  }

  /** Whether the projections know the row's job from the row (cold or materialised), not from a newer record. */
  isKnownByRow(row: number): boolean {
    return this.cold[row] !== LEFT;
  }

  queueAt(row: number): string {
    return this.columns.queues[this.queueOf[row]!]!;
  }

  /** The length in bytes of the row's record line, without reading it. */
  lineBytesAt(row: number): number {
    return this.columns.bodyEnds[row]! - (row === 0 ? 0 : this.columns.bodyEnds[row - 1]!);
  }

  /** The row's record line, as the checkpoint holds it; valid until the next read of a line (copy it to keep it). */
  lineAt(row: number): Buffer {
    return this.columns.bodies.read(row === 0 ? 0 : this.columns.bodyEnds[row - 1]!, this.columns.bodyEnds[row]!);
  }

  /** Lets go of the checkpoint file the lines are read from (the node stops). */
  close(): void {
    this.columns.bodies.close();
  }

  /** The row's record, decoded (the row stays as it is). */
  recordAt(row: number): JobRecord {
    return this.decode(this.lineAt(row).toString('utf8'));
  }

  /** The job id of a row without decoding its record: the line starts with it (`["<id>",`). */
  jobIdAt(row: number): string {
    const line = this.lineAt(row);
    const end = line.indexOf(34, 2);
    const id = line.toString('utf8', 2, end);
    // An id with an escape in it (none that docket makes) is read the long way.
    return line[end - 1] === 92 ? this.recordAt(row).jobId : id;
  }

  /** Takes the row out of the cold set: its record, which the caller now holds as an object. */
  materialise(row: number): JobRecord {
    const record = this.recordAt(row);
    if (this.cold[row] === COLD) this.left -= 1;
    this.cold[row] = MATERIALISED;
    return record;
  }

  /** The row is superseded by a newer record of its job, restored as an object (the projections hear of it). */
  leave(row: number): void {
    if (this.cold[row] === COLD) this.left -= 1;
    this.cold[row] = LEFT;
  }

  /** The cold rows, in order. */
  *coldRows(): Generator<number> {
    for (let row = 0; row < this.cold.length; row++) if (this.cold[row] === COLD) yield row;
  }
}
