/**
 * Checkpoints: job records and the stream sequence folded, kept in a local file so a restart
 * folds only the tail of the log. A checkpoint is a cache: it is dropped when the machine
 * versions or the stream (its creation time) differ, and the log is folded from the start.
 *
 * The file is written incrementally, because rewriting every record on every checkpoint costs
 * O(jobs) each time: with a million jobs queued, that stole half the CPU from claims for seconds.
 * So the file is a header line, then segments. A segment holds the records changed since the
 * previous one (lines of JSON arrays of records) and ends with a seal line naming the sequence
 * it covers and how many records it holds. A later segment's record replaces an earlier one. A
 * segment without its seal (a crash mid-write) is ignored and cut off before the next append.
 * When the file holds more than twice as many records as there are jobs, it is rewritten whole
 * (to a temporary file renamed at the end), so its size and the restore time stay O(jobs) and
 * each change is written O(1) times on average.
 *
 * Records are immutable and replaced on change, so a record changed while a segment is written
 * is written either way; the tail replay from the seal's sequence skips what a newer record
 * already holds (idempotent by the record's own sequence).
 */
import { closeSync, openSync } from 'node:fs';
import { mkdir, open, rename, rm, truncate, type FileHandle } from 'node:fs/promises';
import { endianness } from 'node:os';
import { dirname } from 'node:path';
import { INITIAL_JOB_STATE, MACHINE_VERSIONS, sameBackoff, type BackoffPolicy, type JobContext, type JobState } from '../../machines/index.js';
import { JobDefaults } from '../commands/limits.js';
import { NO_EVENTS, type EvictedLine, type HistoryEntry, type JobRecord } from './job-store.js';
import { fingerprintFromText, fingerprintOf, fingerprintToText, type Fingerprint } from './evicted-index.js';
import { ColdJobs, FileBodies, type ColdColumns } from './cold-jobs.js';
import { FileReader } from './file-reader.js';
import { Pacer } from '../pacer.js';
import type { AggregateRecord } from './aggregate-store.js';

/** 8: queued jobs as a binary block of columns and record lines (cold-jobs.ts). 7: evicted jobs (compact lines; a segment's names the job whose earlier record it ends). 6: a job's depends_on after its concurrency_key. 5: a job's concurrency_key (flow control) after its run. 4: log v2, records hold event positions. */
const FORMAT = 8;
/** Formats read as well: 7's lines are 8's without a cold block (a restart after the upgrade does not fold the whole log). */
const READABLE_FORMATS: readonly number[] = [7, FORMAT];
/** Records per line and per write: large enough to be fast, small enough not to stall commands. */
const CHUNK_RECORDS = 2_000;
/**
 * When the file is rewritten whole: it holds more than `ratio` times the live records, plus
 * `slack`; or its segments (written after the last whole write) hold more than `segmentShare`
 * of the live records, plus `slack`. Segments are lines of JSON, restored as objects (~3.5 µs a
 * record); a whole rewrite puts queued jobs in the cold block, restored in bulk: so a node filled
 * after its last whole write (a million jobs submitted after a start on an empty file) restarts
 * from its cold block, not from a million lines.
 */
export interface CompactionPolicy {
  readonly ratio: number;
  readonly slack: number;
  readonly segmentShare?: number;
}
const DEFAULT_COMPACTION: CompactionPolicy = { ratio: 2, slack: 10_000, segmentShare: 0.25 };

interface CheckpointHeader {
  readonly format: number;
  /** The byte order of the binary block's columns (this machine's; another's checkpoint is not used). */
  readonly endian?: 'LE' | 'BE';
  readonly versions: typeof MACHINE_VERSIONS;
  readonly stream_created: string;
}

/** Every non-job aggregate, written whole in each segment before its seal. */
interface AggregatesLine {
  readonly aggregates: readonly AggregateRecord[];
}

/**
 * Evicted jobs (job-store.ts `evict`): [job id, or 0 in a whole rewrite (no earlier record to
 * end), fingerprints (base64url, the id's first), status, outcome, queue, event positions].
 */
type EvictedTuple = [jobId: string | 0, fingerprints: string[], status: EvictedLine['status'], outcome: EvictedLine['outcome'], queue: string, positions: number[]];

interface EvictedLines {
  readonly evicted: readonly EvictedTuple[];
}

function toEvictedTuple(jobId: string | 0, line: EvictedLine): EvictedTuple {
  return [jobId, line.fingerprints.map(fingerprintToText), line.status, line.outcome, line.queue, [...line.positions]];
}

function fromEvictedTuple(tuple: EvictedTuple): EvictedLine {
  const [, fingerprints, status, outcome, queue, positions] = tuple;
  return { fingerprints: fingerprints.map(fingerprintFromText), status, outcome, queue, positions };
}

/**
 * The line before the binary block of cold jobs (cold-jobs.ts): the block follows it, `bytes`
 * long, then a newline. The block: per row the fingerprint (4 × u32), then columns of f64
 * (priority, position, submit sequence, run_at in ms), the record lines' end offsets (u32),
 * then the record lines themselves. Rows are grouped by queue (`ranges`) and, within a queue,
 * in queue order. Only a whole rewrite writes it, in its first and only segment.
 */
interface ColdLine {
  readonly cold: { readonly rows: number; readonly queues: readonly string[]; readonly ranges: readonly (readonly [number, number])[]; readonly bytes: number };
}

interface SealLine {
  /** Every event up to this stream sequence is in the records so far. */
  readonly seal: number;
  /** Records in the segment this line ends. */
  readonly records: number;
  /** Evicted jobs in the segment this line ends (absent: none). */
  readonly evicted_jobs?: number;
  /** Rows of the cold block in the segment this line ends (absent: none). */
  readonly cold_jobs?: number;
}

export interface Checkpoint {
  readonly seq: number;
  /** The records held as lines (every job but the cold ones). */
  readonly records: readonly JobRecord[];
  /** Queued jobs held as a block (rows a later segment superseded have left it). */
  readonly cold: ColdJobs | undefined;
  /** The non-job aggregates (queues, reservations, ...) as of the last seal: few, so each segment holds them all. */
  readonly aggregates: readonly AggregateRecord[];
  /** Jobs whose bodies were evicted (compact entries). */
  readonly evicted: readonly EvictedLine[];
  /** Record lines in the file's sealed segments (superseded ones included): the compaction measure. */
  readonly recordsInFile: number;
  /** Byte length of the sealed part: anything after it is a torn segment. */
  readonly sealedBytes: number;
  /** Record lines in the segments after the first (the last whole write). */
  readonly recordsInSegments: number;
}

/** What the writer needs of the job store. */
export interface CheckpointSource {
  readonly size: number;
  readonly evictedCount: number;
  get(jobId: string): JobRecord | undefined;
  /** The jobs held as objects, and how many. */
  warmValues(): IterableIterator<JobRecord>;
  readonly warmSize: number;
  /** The cold jobs, copied as they are. */
  readonly cold: ColdJobs | undefined;
  evictedLines(): Iterable<EvictedLine>;
}

/** Every record of a checkpoint, the cold ones decoded (tests and tools; a node keeps them cold). */
export function checkpointRecords(checkpoint: Checkpoint): JobRecord[] {
  const cold = checkpoint.cold;
  return cold === undefined ? [...checkpoint.records] : [...checkpoint.records, ...[...cold.coldRows()].map((row) => cold.recordAt(row))];
}

/**
 * Whether a record can be held cold: queued, unkeyed (the key index holds every keyed job),
 * without dependencies, and nothing after job.submitted (flow counts read claims from history).
 * Whether it is due is decided when it is read back (a job not yet due is restored as an object).
 */
function isColdable(record: JobRecord): boolean {
  const { value, context } = record.state.job;
  return value === 'queued' && context.key === null && context.depends_on === null && record.later.length === 0;
}

/**
 * A record as one flat JSON array: what the file spends its bytes and the restart its parsing
 * on, so no keys. The context's job_id and queue repeat the record's; created_at is usually
 * run_at (0), backoff usually the default (0), and a run that never started is the shared
 * initial state (0). Restored records are equal to the folded ones, field for field; the object
 * literal in fromLine gives every restored context one shape, checked against JobContext.
 */
type RecordLine = [
  jobId: string,
  queue: string,
  seq: number,
  submitSeq: number,
  submitId: string | null,
  later: readonly HistoryEntry[] | 0,
  status: JobState['job']['value'],
  key: JobContext['key'],
  params: JobContext['params'],
  priority: number,
  position: number | null,
  runAt: string,
  maxAttempts: number,
  backoff: BackoffPolicy | 0,
  attempt: number,
  retryOf: string | null,
  createdAt: string | 0,
  finishedAt: string | null,
  endReason: string | null,
  run: JobState['run'] | 0,
  concurrencyKey: string | null,
  dependsOn: readonly string[] | null,
  commandHash?: string,
];


function toLine(record: JobRecord): RecordLine {
  const { job, run } = record.state;
  const c = job.context;
  return [
    record.jobId, record.queue, record.seq, record.submitSeq, record.submitId, record.later.length === 0 ? 0 : record.later, job.value,
    c.key, c.params, c.priority, c.position, c.run_at, c.max_attempts, sameBackoff(c.backoff, JobDefaults.backoff) ? 0 : c.backoff, c.attempt, c.retry_of,
    c.created_at === c.run_at ? 0 : c.created_at, c.finished_at, c.end_reason,
    run === INITIAL_JOB_STATE.run ? 0 : run,
    c.concurrency_key,
    c.depends_on,
    // Last and only when there is one: most jobs are submitted without a command id.
    ...(record.commandHash === null ? [] : [record.commandHash]),
  ] as RecordLine;
}

function decodeRecord(text: string): JobRecord {
  return fromLine(JSON.parse(text) as RecordLine);
}

function fromLine(line: RecordLine): JobRecord {
  const [jobId, queue, seq, submitSeq, submitId, later, status, key, params, priority, position, runAt, maxAttempts, backoff, attempt, retryOf, createdAt, finishedAt, endReason, run, concurrencyKey, dependsOn, commandHash] = line;
  const context: JobContext = {
    job_id: jobId,
    queue,
    key,
    params,
    priority,
    position,
    run_at: runAt,
    max_attempts: maxAttempts,
    backoff: backoff === 0 ? JobDefaults.backoff : backoff,
    attempt,
    retry_of: retryOf,
    created_at: createdAt === 0 ? runAt : createdAt,
    finished_at: finishedAt,
    end_reason: endReason,
    concurrency_key: concurrencyKey,
    depends_on: dependsOn,
  };
  return { jobId, queue, state: { job: { value: status, context }, run: run === 0 ? INITIAL_JOB_STATE.run : run } as JobState, seq, submitSeq, submitId, commandHash: commandHash ?? null, later: later === 0 ? NO_EVENTS : later };
}

/**
 * Writes `sources` as JSON lines of CHUNK_RECORDS items each (`line` makes a chunk's line),
 * taking each source between the pacer's pauses, so a store's records and evicted jobs are made
 * as they are written; an undefined source (a record left to the cold block) is skipped.
 * Returns how many items it wrote.
 */
async function writeChunked<S, T>(file: LineSink, sources: Iterable<S | undefined>, pacer: Pacer, item: (source: S) => T, line: (chunk: T[]) => unknown): Promise<number> {
  let count = 0;
  let chunk: T[] = [];
  const flush = async (): Promise<void> => {
    await file.write(`${JSON.stringify(line(chunk))}\n`);
    count += chunk.length;
    chunk = [];
  };
  for (const source of sources) {
    if (pacer.due()) await pacer.pause();
    if (source === undefined) continue;
    chunk.push(item(source));
    if (chunk.length >= CHUNK_RECORDS) await flush();
  }
  if (chunk.length > 0) await flush();
  return count;
}

function writeRecords(file: LineSink, records: Iterable<JobRecord | undefined>, pacer: Pacer): Promise<number> {
  return writeChunked(file, records, pacer, toLine, (chunk) => chunk);
}

/** Evicted jobs, each with the job id whose earlier record its line ends (0 in a whole rewrite: there is none). */
function writeEvicted(file: LineSink, lines: Iterable<readonly [jobId: string | 0, line: EvictedLine]>, pacer: Pacer): Promise<number> {
  return writeChunked(file, lines, pacer, ([jobId, line]) => toEvictedTuple(jobId, line), (evicted) => ({ evicted }) satisfies EvictedLines);
}

/** A column of numbers that grows as rows are added, `width` numbers a row. */
class GrowableColumn<T extends Float64Array | Uint32Array> {
  constructor(
    private values: T,
    private readonly width = 1,
  ) {}

  /** The column, with room for `rows` rows. */
  room(rows: number): T {
    if (rows * this.width > this.values.length) {
      const grown = new (this.values.constructor as new (n: number) => T)(Math.max(this.values.length * 2, rows * this.width));
      grown.set(this.values);
      this.values = grown;
    }
    return this.values;
  }
}

/** Where a cold row's record line comes from: a record, stringified as the block is written, or a row of the current block. */
type LineSource = JobRecord | number;

/**
 * Collects the rows of the cold block by queue, then writes them in queue order. A row is a slot
 * in each column and a reference to its record (records are immutable, replaced on change, so
 * the reference is the record as listed); its line is made as it is written. A row as an object
 * holding its line as a buffer made a million of each for a million queued jobs: ~250 MB of
 * garbage that a node gone idle after the write kept resident (README "Performance", memory per
 * queued job).
 */
class ColdRowsBuilder {
  private readonly byQueue = new Map<string, number[]>();
  private readonly fingerprints = new GrowableColumn(new Uint32Array(4 * 1024), 4);
  private readonly priority = new GrowableColumn(new Float64Array(1024));
  private readonly position = new GrowableColumn(new Float64Array(1024));
  private readonly submitSeq = new GrowableColumn(new Float64Array(1024));
  private readonly runAtMs = new GrowableColumn(new Float64Array(1024));
  private readonly sources: LineSource[] = [];

  /** `cold`: the store's current block, whose rows addRow copies. */
  constructor(private readonly cold: ColdJobs | undefined) {}

  private add(queue: string, fp: Fingerprint | Uint32Array, priority: number, position: number, submitSeq: number, runAtMs: number, source: LineSource): void {
    const row = this.sources.length;
    this.sources.push(source);
    this.fingerprints.room(row + 1).set(fp, row * 4);
    this.priority.room(row + 1)[row] = priority;
    this.position.room(row + 1)[row] = position;
    this.submitSeq.room(row + 1)[row] = submitSeq;
    this.runAtMs.room(row + 1)[row] = runAtMs;
    let rows = this.byQueue.get(queue);
    if (!rows) this.byQueue.set(queue, (rows = []));
    rows.push(row);
  }

  addRecord(record: JobRecord, fp: Fingerprint): void {
    const c = record.state.job.context;
    this.add(record.queue, fp, c.priority, c.position ?? record.submitSeq, record.submitSeq, Date.parse(c.run_at), record);
  }

  addRow(row: number): void {
    const cold = this.cold!;
    const c = cold.columns;
    this.add(cold.queueAt(row), c.fingerprints.subarray(row * 4, row * 4 + 4), c.priority[row]!, c.position[row]!, c.submitSeq[row]!, c.runAtMs[row]!, row);
  }

  /**
   * Writes the block at `file`'s position (nothing when there are no rows); returns its rows.
   * The columns end with the lines' end offsets, so the lines are made and written first, past
   * where the columns go; then the columns; then the line before them, its `bytes` padded to a
   * fixed width (JSON allows the spaces), so that the block's place is known before its size.
   */
  async write(file: PositionedFile, pacer: Pacer): Promise<number> {
    const n = this.sources.length;
    if (n === 0) return 0;
    const [priority, position, submitSeq, runAtMs, fingerprints] = [this.priority, this.position, this.submitSeq, this.runAtMs, this.fingerprints].map((column) => column.room(n)) as [Float64Array, Float64Array, Float64Array, Float64Array, Uint32Array];
    const queues = [...this.byQueue.keys()];
    const ranges: [number, number][] = [];
    const order = new Uint32Array(n);
    let ordered = 0;
    for (const queue of queues) {
      // Mostly in order already (submit order): the sort's runs make it close to linear (~20 ms
      // for a million rows of one priority, ~90 ms for three).
      const sorted = this.byQueue.get(queue)!.sort((a, b) => priority[a]! - priority[b]! || position[a]! - position[b]! || submitSeq[a]! - submitSeq[b]!);
      ranges.push([ordered, ordered + sorted.length]);
      order.set(sorted, ordered);
      ordered += sorted.length;
      if (pacer.due()) await pacer.pause();
    }
    const columns = { fingerprints: new Uint32Array(n * 4), priority: new Float64Array(n), position: new Float64Array(n), submitSeq: new Float64Array(n), runAtMs: new Float64Array(n), bodyEnds: new Uint32Array(n) };
    // Element by element: a subarray per row made a million views (~70 ms against ~10).
    for (let i = 0; i < n; i++) {
      const row = order[i]!;
      for (let k = 0; k < 4; k++) columns.fingerprints[i * 4 + k] = fingerprints[row * 4 + k]!;
      columns.priority[i] = priority[row]!;
      columns.position[i] = position[row]!;
      columns.submitSeq[i] = submitSeq[row]!;
      columns.runAtMs[i] = runAtMs[row]!;
    }
    const parts = Object.values(columns).map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength));
    const columnBytes = parts.reduce((sum, b) => sum + b.length, 0);
    const coldLine = (bytes: number): string => JSON.stringify({ cold: { rows: n, queues, ranges, bytes } } satisfies ColdLine);
    const lineBytes = Buffer.byteLength(coldLine(Number.MAX_SAFE_INTEGER)) + 1;
    const lineAt = file.position;
    const linesAt = lineAt + lineBytes + columnBytes;
    // Lines are copied into one reused batch as they are made: a cold row's line is read from
    // the old file into a block the next read may reuse.
    const batch = Buffer.allocUnsafe(LINE_BATCH_BYTES);
    let batchBytes = 0;
    let end = 0;
    for (let i = 0; i < n; i++) {
      if (pacer.due()) await pacer.pause();
      const source = this.sources[order[i]!]!;
      // A cold row's line is a view of a read block that a command's read during any await may
      // reuse: it is taken only after the awaits for its room, and copied before the next one.
      const made = typeof source === 'number' ? null : Buffer.from(JSON.stringify(toLine(source)));
      const length = typeof source === 'number' ? this.cold!.lineBytesAt(source) : made!.length;
      if (batchBytes + length > batch.length) {
        await file.writeAt(linesAt + end - batchBytes, batch, batchBytes);
        batchBytes = 0;
      }
      const line = typeof source === 'number' ? this.cold!.lineAt(source) : made!;
      if (length > batch.length) await file.writeAt(linesAt + end, made ?? Buffer.from(line));
      else batchBytes += line.copy(batch, batchBytes);
      end += length;
      columns.bodyEnds[i] = end;
    }
    if (batchBytes > 0) await file.writeAt(linesAt + end - batchBytes, batch, batchBytes);
    const line = coldLine(columnBytes + end);
    // Padded in bytes, not characters (a queue name is ASCII today; the padding need not know it).
    await file.writeAt(lineAt, Buffer.from(`${line}${' '.repeat(lineBytes - 1 - Buffer.byteLength(line))}\n`));
    let at = lineAt + lineBytes;
    for (const part of parts) {
      await file.writeAt(at, part);
      at += part.length;
    }
    file.position = linesAt + end;
    await file.write('\n');
    return n;
  }
}

/** Bytes of record lines written at once: a few thousand lines made between two writes, so commands get their turns. */
const LINE_BATCH_BYTES = 1 << 20;

/** Where a checkpoint's lines go: a file opened to append, or a PositionedFile. */
interface LineSink {
  write(line: string): Promise<unknown>;
}

/** A new file written at positions it keeps, not the descriptor's: the cold block's parts are written out of order. */
class PositionedFile implements LineSink {
  position = 0;
  constructor(private readonly file: FileHandle) {}

  async write(line: string): Promise<void> {
    const bytes = Buffer.from(line);
    await this.writeAt(this.position, bytes);
    this.position += bytes.length;
  }

  async writeAt(position: number, bytes: Uint8Array, length = bytes.length): Promise<void> {
    for (let done = 0; done < length; ) {
      const { bytesWritten } = await this.file.write(bytes, done, length - done, position + done);
      done += bytesWritten;
    }
  }
}

/**
 * Reads a cold block's columns (the reader at its start) into arrays; its record lines stay in
 * the file (`FileBodies`), read when a job is. Null when the file ends inside the block.
 */
function readColdBlock(line: ColdLine, reader: FileReader, fd: number): ColdColumns | null {
  const { rows: n, queues, ranges, bytes } = line.cold;
  const start = reader.position;
  // Arrays of their own, read into straight from the file: typed arrays need aligned offsets.
  const columns = {
    fingerprints: new Uint32Array(n * 4),
    priority: new Float64Array(n),
    position: new Float64Array(n),
    submitSeq: new Float64Array(n),
    runAtMs: new Float64Array(n),
    bodyEnds: new Uint32Array(n),
  };
  for (const array of Object.values(columns)) if (!reader.readInto(new Uint8Array(array.buffer))) return null;
  const linesAt = reader.position;
  const linesBytes = start + bytes - linesAt;
  if (linesBytes !== (n === 0 ? 0 : columns.bodyEnds[n - 1]!)) throw new Error('cold block: lengths do not add up');
  reader.skip(linesBytes);
  return { queues, ranges, ...columns, bodies: new FileBodies(fd, linesAt, linesBytes) };
}

/**
 * The checkpoint file of one node: tracks which jobs changed since the last write and writes
 * them as the next segment. Not re-entrant: the caller serialises writes.
 */
export class CheckpointFile {
  private dirty = new Set<string>();
  /** Jobs evicted since the last write, with their entries. */
  private evictions = new Map<string, EvictedLine>();
  /** Record lines in the file; undefined until the file is known good (forces a full write). */
  private recordsInFile: number | undefined;
  /** Record lines in the segments after the last whole write. */
  private recordsInSegments = 0;

  constructor(
    readonly path: string,
    private readonly streamCreated: string,
    private readonly compaction: CompactionPolicy = DEFAULT_COMPACTION,
  ) {}

  /** Notes a job changed by an event (restores from the checkpoint itself are not changes). */
  changed(jobId: string): void {
    this.dirty.add(jobId);
  }

  /** Notes a job whose body was evicted: the next segment ends its record. */
  evicted(jobId: string, line: EvictedLine): void {
    this.evictions.set(jobId, line);
  }

  /** Reads the file; when usable, later writes append to it. */
  async read(): Promise<Checkpoint | null> {
    const checkpoint = await readCheckpoint(this.path, this.streamCreated);
    if (checkpoint) {
      // A torn segment at the end is cut off, so the next segment follows a sealed one.
      await truncate(this.path, checkpoint.sealedBytes);
      this.recordsInFile = checkpoint.recordsInFile;
      this.recordsInSegments = checkpoint.recordsInSegments;
    }
    return checkpoint;
  }

  /** Writes everything changed since the last write, sealed at `seq`; compacts when due. */
  async write(seq: number, store: CheckpointSource, aggregates: readonly AggregateRecord[] = []): Promise<{ records: number; full: boolean }> {
    const ids = this.dirty;
    this.dirty = new Set();
    const evictions = this.evictions;
    this.evictions = new Map();
    // Evicted jobs count as records: a file of mostly evicted jobs is not rewritten on every write.
    const live = store.size + store.evictedCount;
    const changes = ids.size + evictions.size;
    const { ratio, slack, segmentShare = Infinity } = this.compaction;
    const full = this.recordsInFile === undefined || this.recordsInFile + changes > ratio * live + slack || this.recordsInSegments + changes > segmentShare * live + slack;
    try {
      if (full) {
        const records = await this.writeWhole(seq, store, aggregates);
        this.recordsInFile = records;
        this.recordsInSegments = 0;
        return { records, full };
      }
      const file = await open(this.path, 'a');
      try {
        const pacer = new Pacer();
        const records = await writeRecords(file, (function* () {
          for (const id of ids) yield store.get(id);
        })(), pacer);
        const evicted = await writeEvicted(file, evictions, pacer);
        await file.write(`${JSON.stringify({ aggregates } satisfies AggregatesLine)}\n`);
        await file.write(`${JSON.stringify({ seal: seq, records, ...(evicted === 0 ? {} : { evicted_jobs: evicted }) } satisfies SealLine)}\n`);
        this.recordsInFile! += records + evicted;
        this.recordsInSegments += records + evicted;
        return { records, full };
      } finally {
        await file.close();
      }
    } catch (err) {
      // What was not written is still to write, and the file's tail is unknown: rewrite it whole next time.
      for (const id of ids) this.dirty.add(id);
      for (const [id, line] of evictions) if (!this.evictions.has(id)) this.evictions.set(id, line);
      this.recordsInFile = undefined;
      throw err;
    }
  }

  private async writeWhole(seq: number, store: CheckpointSource, aggregates: readonly AggregateRecord[]): Promise<number> {
    await mkdir(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.${process.pid}.tmp`;
    const handle = await open(tmp, 'w');
    const file = new PositionedFile(handle);
    try {
      const header: CheckpointHeader = { format: FORMAT, endian: endianness(), versions: MACHINE_VERSIONS, stream_created: this.streamCreated };
      await file.write(`${JSON.stringify(header)}\n`);
      // Jobs created while this runs are in the next segment: stop at the ones there now, or a
      // busy node's Map iteration (which visits entries added meanwhile) would never end.
      const coldRows = new ColdRowsBuilder(store.cold);
      // The rows cold now are written from their bytes even if read meanwhile (the writes below
      // yield to commands): a job read but not changed would otherwise be in neither part.
      const cold = store.cold;
      const coldNow = cold === undefined ? [] : Array.from(cold.coldRows());
      const wasCold = new Uint8Array(cold?.rows ?? 0);
      for (const row of coldNow) wasCold[row] = 1;
      // A checkpoint of a million jobs takes seconds of CPU: paced, so that the node's commands
      // go on beside it (a whole rewrite held the loop 2.4 s at once, bench/checkpoint-write.ts).
      const pacer = new Pacer();
      const records = await writeRecords(file, (function* () {
        let left = store.warmSize;
        for (const record of store.warmValues()) {
          if (left-- <= 0) return;
          if (!isColdable(record)) {
            yield record;
            continue;
          }
          const fp = fingerprintOf(record.jobId);
          // Read (unchanged: a change would make it not coldable) since the rows were listed: its row is written.
          const row = cold === undefined ? -1 : cold.rowOf(fp);
          if (row < 0 || wasCold[row] === 0) coldRows.addRecord(record, fp);
          yield undefined;
        }
      })(), pacer);
      for (const row of coldNow) {
        coldRows.addRow(row);
        if (pacer.due()) await pacer.pause();
      }
      const coldJobs = await coldRows.write(file, pacer);
      const evicted = await writeEvicted(file, (function* () {
        for (const line of store.evictedLines()) yield [0, line] as const;
      })(), pacer);
      await file.write(`${JSON.stringify({ aggregates } satisfies AggregatesLine)}\n`);
      await file.write(`${JSON.stringify({ seal: seq, records, ...(evicted === 0 ? {} : { evicted_jobs: evicted }), ...(coldJobs === 0 ? {} : { cold_jobs: coldJobs }) } satisfies SealLine)}\n`);
      await handle.close();
      await rename(tmp, this.path);
      return records + evicted + coldJobs;
    } catch (err) {
      await handle.close().catch(() => undefined);
      await rm(tmp, { force: true });
      throw err;
    }
  }
}

/**
 * The checkpoint at `path` if it is usable for this stream and these machines; otherwise null.
 * Its cold rows' record lines are left in the file (read through a descriptor the returned
 * `cold` holds until closed).
 */
export async function readCheckpoint(path: string, streamCreated: string): Promise<Checkpoint | null> {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return null;
  }
  let keepOpen = false;
  try {
    const checkpoint = readCheckpointFrom(fd, streamCreated);
    keepOpen = checkpoint?.cold !== undefined;
    return checkpoint;
  } finally {
    if (!keepOpen) closeSync(fd);
  }
}

function readCheckpointFrom(fd: number, streamCreated: string): Checkpoint | null {
  const reader = new FileReader(fd);
  try {
    let header: CheckpointHeader | undefined;
    const byJob = new Map<string, JobRecord>();
    let pending: JobRecord[] = [];
    let pendingEvicted: EvictedTuple[] = [];
    const evictedById = new Map<string, EvictedLine>();
    let pendingAggregates: readonly AggregateRecord[] | undefined;
    let aggregates: readonly AggregateRecord[] = [];
    let pendingCold: ColdJobs | undefined;
    let cold: ColdJobs | undefined;
    let seq: number | undefined;
    let recordsInFile = 0;
    let recordsInFirst: number | undefined;
    let sealedBytes = 0;
    /** A record or eviction in a later segment supersedes the job's cold row. */
    const supersede = (jobId: string): void => {
      if (cold === undefined) return;
      const row = cold.rowOf(fingerprintOf(jobId));
      if (row >= 0) cold.leave(row);
    };
    // A cold block's bytes are skipped by their length; its columns are read into arrays.
    for (let bytes = reader.nextLine(); bytes !== null; bytes = reader.nextLine()) {
      const text = bytes.toString('utf8');
      if (text.length === 0) continue;
      if (!header) {
        header = JSON.parse(text) as CheckpointHeader;
        if (!READABLE_FORMATS.includes(header.format) || header.stream_created !== streamCreated || (header.endian ?? 'LE') !== endianness() || JSON.stringify(header.versions) !== JSON.stringify(MACHINE_VERSIONS)) return null;
        continue;
      }
      const parsed = JSON.parse(text) as RecordLine[] | SealLine | AggregatesLine | EvictedLines | ColdLine;
      if (Array.isArray(parsed)) {
        for (const item of parsed) pending.push(fromLine(item));
        continue;
      }
      if ('aggregates' in parsed) {
        pendingAggregates = parsed.aggregates;
        continue;
      }
      if ('evicted' in parsed) {
        pendingEvicted.push(...parsed.evicted);
        continue;
      }
      if ('cold' in parsed) {
        // Only a whole rewrite's one segment holds a block; its end must be in the file.
        if (seq !== undefined || pendingCold !== undefined || reader.position + parsed.cold.bytes >= reader.size) return null;
        const columns = readColdBlock(parsed, reader, fd);
        // The block ends with its newline: an empty line.
        if (columns === null || reader.nextLine()?.length !== 0) return null;
        pendingCold = new ColdJobs(columns, decodeRecord);
        continue;
      }
      // A seal whose count does not match its segment: a foreign or damaged file.
      if (parsed.records !== pending.length || (parsed.evicted_jobs ?? 0) !== pendingEvicted.length || (parsed.cold_jobs ?? 0) !== (pendingCold?.rows ?? 0)) return null;
      if (pendingCold !== undefined) {
        cold = pendingCold;
        recordsInFile += cold.rows;
        pendingCold = undefined;
      }
      for (const record of pending) {
        byJob.set(record.jobId, record);
        supersede(record.jobId);
      }
      for (const tuple of pendingEvicted) {
        // Its earlier record (in this segment or before) ends here; a later segment's record is its body read back and changed.
        if (tuple[0] !== 0) {
          byJob.delete(tuple[0]);
          supersede(tuple[0]);
        }
        evictedById.set(tuple[1][0]!, fromEvictedTuple(tuple));
      }
      recordsInFile += pendingEvicted.length;
      pendingEvicted = [];
      if (pendingAggregates !== undefined) aggregates = pendingAggregates;
      pendingAggregates = undefined;
      recordsInFile += pending.length;
      pending = [];
      seq = parsed.seal;
      recordsInFirst ??= recordsInFile;
      sealedBytes = reader.position;
    }
    // What follows the last newline is a line cut short: part of a torn segment, never sealed.
    if (seq === undefined) return null;
    return { seq, records: [...byJob.values()], cold, aggregates, evicted: [...evictedById.values()], recordsInFile, sealedBytes, recordsInSegments: recordsInFile - (recordsInFirst ?? 0) };
  } catch {
    // A torn segment's half line, or a foreign file: what was sealed before it stands, unless
    // nothing was. A parse error inside the sealed part cannot be told apart, so fold from zero.
    return null;
  }
}
