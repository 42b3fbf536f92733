/**
 * The compact index of evicted jobs: what stays in memory of a finished job once its body has
 * left (job-store.ts, `evict`). Per job: its status, the outcome of its retry chain (what a
 * `depends_on` naming it comes to), its queue (interned) and the positions of its events, so
 * its body can be read back from the log commit by commit, never by scanning.
 *
 * Ids are held as 128-bit fingerprints (SHA-256 of the id, first 16 bytes) in typed arrays,
 * not as strings in a Map: a string id and a Map entry alone cost ~90 bytes, over the budget
 * of 100 bytes per finished job. 128 bits are as unique as the random ids themselves. A job
 * may be found under more than one fingerprint: its id, and its job.submitted event id when a
 * resent submit must find it by that (a keyed submit with a command id).
 */
import { hash } from 'node:crypto';
import type { JobStatus, Position } from '../../machines/index.js';

/** Status codes (4 bits): the order is part of the checkpoint format. */
const STATUS_CODES: readonly JobStatus[] = ['new', 'waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped', 'ignored', 'removed'];
const CODE_OF = new Map<JobStatus, number>(STATUS_CODES.map((s, i) => [s, i]));

/** A 128-bit fingerprint as four 32-bit words. */
export type Fingerprint = readonly [number, number, number, number];

export function fingerprintOf(id: string): Fingerprint {
  // The one-shot hash: ~1 µs against ~8 µs for createHash's object on this machine, and a whole
  // checkpoint write fingerprints every queued job (cold-jobs.ts).
  const d = hash('sha256', id, 'buffer');
  return [d.readUInt32LE(0), d.readUInt32LE(4), d.readUInt32LE(8), d.readUInt32LE(12)];
}

/** The fingerprint a job.submitted event id is found under: apart from every job id's (no id holds a NUL). */
export function submitEventFingerprintOf(eventId: string): Fingerprint {
  return fingerprintOf(`\u0000submit:${eventId}`);
}

export function fingerprintToText(fp: Fingerprint): string {
  const b = Buffer.alloc(16);
  for (let i = 0; i < 4; i++) b.writeUInt32LE(fp[i]!, i * 4);
  return b.toString('base64url');
}

export function fingerprintFromText(text: string): Fingerprint {
  const b = Buffer.from(text, 'base64url');
  if (b.length !== 16) throw new Error(`not a fingerprint: ${text}`);
  return [b.readUInt32LE(0), b.readUInt32LE(4), b.readUInt32LE(8), b.readUInt32LE(12)];
}

/** One evicted job as the index holds it. */
export interface EvictedJob {
  /** The job's row in the index (a handle for `positionsOf` and updates). */
  readonly row: number;
  readonly queue: string;
  readonly status: JobStatus;
  /** What its retry chain came to when it was evicted: `succeeded`, or the status it ended with. */
  readonly outcome: JobStatus;
  /** Its events' positions, oldest first (job.submitted first). */
  readonly positions: readonly Position[];
}

/** What `add` takes; `aliases`: other ids (event ids) it is found under. */
export interface EvictedEntry {
  readonly queue: string;
  readonly status: JobStatus;
  readonly outcome: JobStatus;
  readonly positions: readonly Position[];
}

const GROWTH = 1.5;

function grown<T extends Uint8Array | Uint16Array | Uint32Array | Float64Array>(array: T, needed: number, make: (n: number) => T): T {
  if (needed <= array.length) return array;
  const next = make(Math.max(needed, Math.ceil(array.length * GROWTH), 16));
  next.set(array);
  return next;
}

export class EvictedIndex {
  // Keys (fingerprints): four words each, and the job row each one names.
  private keyWords = new Uint32Array(64);
  private keyRows = new Uint32Array(16);
  private keys = 0;
  // Open addressing over the keys: slot = key index + 1 (0 = empty), linear probing, load <= 0.7.
  private slots = new Uint32Array(32);
  // Job rows: status (low 4 bits) and outcome (high 4 bits), queue, positions (start, count).
  private meta = new Uint8Array(16);
  private queueRefs = new Uint32Array(16);
  private posStart = new Uint32Array(16);
  private posCount = new Uint16Array(16);
  private rows = 0;
  private positions = new Float64Array(64);
  private positionsUsed = 0;
  private readonly queueIds = new Map<string, number>();
  private readonly queueNames: string[] = [];

  /** Evicted jobs held. */
  get size(): number {
    return this.rows;
  }

  /** The key index holding this fingerprint, or -1. */
  private findKey(fp: Fingerprint): number {
    const mask = this.slots.length - 1;
    const w = this.keyWords;
    for (let s = fp[0] & mask; ; s = (s + 1) & mask) {
      const slot = this.slots[s]!;
      if (slot === 0) return -1;
      const k = (slot - 1) * 4;
      if (w[k] === fp[0] && w[k + 1] === fp[1] && w[k + 2] === fp[2] && w[k + 3] === fp[3]) return slot - 1;
    }
  }

  private insertSlot(keyIndex: number): void {
    const mask = this.slots.length - 1;
    let s = this.keyWords[keyIndex * 4]! & mask;
    while (this.slots[s] !== 0) s = (s + 1) & mask;
    this.slots[s] = keyIndex + 1;
  }

  private addKey(fp: Fingerprint, row: number): void {
    const held = this.findKey(fp);
    if (held >= 0) {
      // The same id again (a checkpoint segment naming a job evicted before): the newer row wins.
      this.keyRows[held] = row;
      return;
    }
    if ((this.keys + 1) * 10 > this.slots.length * 7) {
      this.slots = new Uint32Array(this.slots.length * 2);
      for (let k = 0; k < this.keys; k++) this.insertSlot(k);
    }
    this.keyWords = grown(this.keyWords, (this.keys + 1) * 4, (n) => new Uint32Array(n));
    this.keyRows = grown(this.keyRows, this.keys + 1, (n) => new Uint32Array(n));
    this.keyWords.set(fp, this.keys * 4);
    this.keyRows[this.keys] = row;
    this.insertSlot(this.keys);
    this.keys += 1;
  }

  private queueRef(queue: string): number {
    let ref = this.queueIds.get(queue);
    if (ref === undefined) {
      ref = this.queueNames.length;
      this.queueNames.push(queue);
      this.queueIds.set(queue, ref);
    }
    return ref;
  }

  private storePositions(row: number, positions: readonly Position[]): void {
    this.positions = grown(this.positions, this.positionsUsed + positions.length, (n) => new Float64Array(n));
    this.posStart[row] = this.positionsUsed;
    this.posCount[row] = Math.min(positions.length, 0xffff);
    for (const p of positions.slice(0, 0xffff)) this.positions[this.positionsUsed++] = p;
  }

  /** Adds a job under its id and its aliases (fingerprints; the id's first); returns its row. A job already held (by its id) is updated in place. */
  add(fingerprints: readonly Fingerprint[], entry: EvictedEntry): number {
    const held = fingerprints.length === 0 ? -1 : this.rowOf(fingerprints[0]!);
    if (held >= 0) {
      this.meta[held] = CODE_OF.get(entry.status)! | (CODE_OF.get(entry.outcome)! << 4);
      this.queueRefs[held] = this.queueRef(entry.queue);
      this.storePositions(held, entry.positions);
      for (const fp of fingerprints.slice(1)) this.addKey(fp, held);
      return held;
    }
    const row = this.rows;
    this.meta = grown(this.meta, row + 1, (n) => new Uint8Array(n));
    this.queueRefs = grown(this.queueRefs, row + 1, (n) => new Uint32Array(n));
    this.posStart = grown(this.posStart, row + 1, (n) => new Uint32Array(n));
    this.posCount = grown(this.posCount, row + 1, (n) => new Uint16Array(n));
    this.meta[row] = CODE_OF.get(entry.status)! | (CODE_OF.get(entry.outcome)! << 4);
    this.queueRefs[row] = this.queueRef(entry.queue);
    this.storePositions(row, entry.positions);
    this.rows += 1;
    for (const fp of fingerprints) this.addKey(fp, row);
    return row;
  }

  /** The row of the job found under this fingerprint, or -1. */
  rowOf(fp: Fingerprint): number {
    if (this.rows === 0) return -1;
    const key = this.findKey(fp);
    return key < 0 ? -1 : this.keyRows[key]!;
  }

  statusAt(row: number): JobStatus {
    return STATUS_CODES[this.meta[row]! & 0xf]!;
  }

  entryAt(row: number): EvictedJob {
    const start = this.posStart[row]!;
    const code = this.meta[row]!;
    return {
      row,
      queue: this.queueNames[this.queueRefs[row]!]!,
      status: STATUS_CODES[code & 0xf]!,
      outcome: STATUS_CODES[code >> 4]!,
      positions: Array.from(this.positions.subarray(start, start + this.posCount[row]!)),
    };
  }

  /** A later event of an evicted job (one a node that kept it longer decided): its position, and its status when it moves. */
  update(row: number, position: Position, status: JobStatus): void {
    const { positions, outcome } = this.entryAt(row);
    // Rows are packed: a longer list moves to the end of the pool (rare; the old place is not reused).
    this.storePositions(row, [...positions, position]);
    this.meta[row] = CODE_OF.get(status)! | (CODE_OF.get(outcome)! << 4);
  }

  /**
   * Every row that some key names, with its keys, in row order: for the checkpoint, which pauses
   * between rows (a million evicted jobs made into objects at once held the loop ~3.8 s). The
   * keys are grouped by row once, in typed arrays, when the walk starts; each row is made as it
   * is asked for, as it is then. Rows and keys added after the start are not visited (they are
   * in the next segment).
   */
  *rowsWithKeys(): Generator<EvictedJob & { readonly fingerprints: readonly Fingerprint[] }> {
    const rows = this.rows;
    const keys = this.keys;
    // A counting sort of the keys by the row each names: starts[row]..starts[row + 1] in `byRow`.
    const starts = new Uint32Array(rows + 1);
    for (let k = 0; k < keys; k++) starts[this.keyRows[k]! + 1]! += 1;
    for (let row = 0; row < rows; row++) starts[row + 1]! += starts[row]!;
    const byRow = new Uint32Array(keys);
    const filled = starts.slice(0, rows);
    for (let k = 0; k < keys; k++) byRow[filled[this.keyRows[k]!]!++] = k;
    for (let row = 0; row < rows; row++) {
      if (starts[row] === starts[row + 1]) continue;
      const fingerprints: Fingerprint[] = [];
      const w = this.keyWords;
      for (let i = starts[row]!; i < starts[row + 1]!; i++) {
        const k = byRow[i]! * 4;
        fingerprints.push([w[k]!, w[k + 1]!, w[k + 2]!, w[k + 3]!]);
      }
      yield { ...this.entryAt(row), fingerprints };
    }
  }
}
