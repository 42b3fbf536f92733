/**
 * Cold jobs: queued jobs restored from a checkpoint and not yet touched, held as the checkpoint
 * stored them (one JSON record line each, in one buffer) plus a few columns, instead of as
 * objects. Restoring a million jobs as objects (parse, a Map entry each, the queue-order heap)
 * took ~3.5 s and most of it was garbage collection; this restore is a file read and a table
 * build. A cold job becomes an object (is materialised) the first time anything reads it: a
 * claim, a `get`, a command on it. Until then the projections know it from the columns: its
 * queue and status (progress), its order key (queue order), its submit sequence (list).
 *
 * Only jobs with nothing else to know go cold: queued, due when the node starts, unkeyed (the key
 * index holds every keyed job), without `depends_on`, and with no event after `job.submitted`
 * (flow counts read claim times from a record's history). Everything else is restored as objects.
 *
 * Ids are found by their 128-bit fingerprints (evicted-index.ts), stored in the checkpoint, in an
 * open-addressing table of typed arrays. A row leaves the cold set for good: materialised (its
 * object is in the job store) or superseded (a later checkpoint segment or the log changed it).
 */
import type { JobRecord } from './job-store.js';
import type { Fingerprint } from './evicted-index.js';

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
  readonly bodies: Buffer;
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

  /** The row's record line, as the checkpoint holds it. */
  lineAt(row: number): Buffer {
    return this.columns.bodies.subarray(row === 0 ? 0 : this.columns.bodyEnds[row - 1]!, this.columns.bodyEnds[row]!);
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
