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
import { createReadStream } from 'node:fs';
import { mkdir, open, rename, rm, truncate, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { INITIAL_JOB_STATE, MACHINE_VERSIONS, type BackoffPolicy, type JobContext, type JobState } from '../../machines/index.js';
import { JobDefaults } from '../commands/limits.js';
import { NO_EVENTS, type EvictedLine, type HistoryEntry, type JobRecord } from './job-store.js';
import { fingerprintFromText, fingerprintToText } from './evicted-index.js';
import type { AggregateRecord } from './aggregate-store.js';

/** 7: evicted jobs (compact lines; a segment's names the job whose earlier record it ends). 6: a job's depends_on after its concurrency_key. 5: a job's concurrency_key (flow control) after its run. 4: log v2, records hold event positions. */
const FORMAT = 7;
/** Records per line and per write: large enough to be fast, small enough not to stall commands. */
const CHUNK_RECORDS = 2_000;
/** When the file is rewritten whole: it holds more than `ratio` times the live records, plus `slack`. */
export interface CompactionPolicy {
  readonly ratio: number;
  readonly slack: number;
}
const DEFAULT_COMPACTION: CompactionPolicy = { ratio: 2, slack: 10_000 };

interface CheckpointHeader {
  readonly format: number;
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

interface SealLine {
  /** Every event up to this stream sequence is in the records so far. */
  readonly seal: number;
  /** Records in the segment this line ends. */
  readonly records: number;
  /** Evicted jobs in the segment this line ends (absent: none). */
  readonly evicted_jobs?: number;
}

export interface Checkpoint {
  readonly seq: number;
  readonly records: readonly JobRecord[];
  /** The non-job aggregates (queues, reservations, ...) as of the last seal: few, so each segment holds them all. */
  readonly aggregates: readonly AggregateRecord[];
  /** Jobs whose bodies were evicted (compact entries). */
  readonly evicted: readonly EvictedLine[];
  /** Record lines in the file's sealed segments (superseded ones included): the compaction measure. */
  readonly recordsInFile: number;
  /** Byte length of the sealed part: anything after it is a torn segment. */
  readonly sealedBytes: number;
}

/** What the writer needs of the job store. */
export interface CheckpointSource {
  readonly size: number;
  readonly evictedCount: number;
  get(jobId: string): JobRecord | undefined;
  values(): IterableIterator<JobRecord>;
  evictedLines(): EvictedLine[];
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

function isDefaultBackoff(b: BackoffPolicy): boolean {
  const d = JobDefaults.backoff;
  return b === d || (b.base_ms === d.base_ms && b.max_ms === d.max_ms && b.jitter === d.jitter);
}

function toLine(record: JobRecord): RecordLine {
  const { job, run } = record.state;
  const c = job.context;
  return [
    record.jobId, record.queue, record.seq, record.submitSeq, record.submitId, record.later.length === 0 ? 0 : record.later, job.value,
    c.key, c.params, c.priority, c.position, c.run_at, c.max_attempts, isDefaultBackoff(c.backoff) ? 0 : c.backoff, c.attempt, c.retry_of,
    c.created_at === c.run_at ? 0 : c.created_at, c.finished_at, c.end_reason,
    run === INITIAL_JOB_STATE.run ? 0 : run,
    c.concurrency_key,
    c.depends_on,
    // Last and only when there is one: most jobs are submitted without a command id.
    ...(record.commandHash === null ? [] : [record.commandHash]),
  ] as RecordLine;
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

async function writeRecords(file: FileHandle, records: Iterable<JobRecord | undefined>): Promise<number> {
  let count = 0;
  let chunk: RecordLine[] = [];
  const flush = async () => {
    if (chunk.length === 0) return;
    await file.write(`${JSON.stringify(chunk)}\n`);
    count += chunk.length;
    chunk = [];
    await new Promise((resolve) => setImmediate(resolve));
  };
  for (const record of records) {
    if (record === undefined) continue;
    chunk.push(toLine(record));
    if (chunk.length >= CHUNK_RECORDS) await flush();
  }
  await flush();
  return count;
}

async function writeEvicted(file: FileHandle, tuples: readonly EvictedTuple[]): Promise<number> {
  for (let i = 0; i < tuples.length; i += CHUNK_RECORDS) {
    await file.write(`${JSON.stringify({ evicted: tuples.slice(i, i + CHUNK_RECORDS) } satisfies EvictedLines)}\n`);
    await new Promise((resolve) => setImmediate(resolve));
  }
  return tuples.length;
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
    const full = this.recordsInFile === undefined || this.recordsInFile + ids.size + evictions.size > this.compaction.ratio * (store.size + store.evictedCount) + this.compaction.slack;
    try {
      if (full) {
        const records = await this.writeWhole(seq, store, aggregates);
        this.recordsInFile = records;
        return { records, full };
      }
      const file = await open(this.path, 'a');
      try {
        const records = await writeRecords(file, (function* () {
          for (const id of ids) yield store.get(id);
        })());
        const evicted = await writeEvicted(file, [...evictions].map(([jobId, line]) => toEvictedTuple(jobId, line)));
        await file.write(`${JSON.stringify({ aggregates } satisfies AggregatesLine)}\n`);
        await file.write(`${JSON.stringify({ seal: seq, records, ...(evicted === 0 ? {} : { evicted_jobs: evicted }) } satisfies SealLine)}\n`);
        this.recordsInFile! += records + evicted;
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
    const file = await open(tmp, 'w');
    try {
      const header: CheckpointHeader = { format: FORMAT, versions: MACHINE_VERSIONS, stream_created: this.streamCreated };
      await file.write(`${JSON.stringify(header)}\n`);
      // Jobs created while this runs are in the next segment: stop at the ones there now, or a
      // busy node's Map iteration (which visits entries added meanwhile) would never end.
      const records = await writeRecords(file, (function* () {
        let left = store.size;
        for (const record of store.values()) {
          if (left-- <= 0) return;
          yield record;
        }
      })());
      const evicted = await writeEvicted(file, store.evictedLines().map((line) => toEvictedTuple(0, line)));
      await file.write(`${JSON.stringify({ aggregates } satisfies AggregatesLine)}\n`);
      await file.write(`${JSON.stringify({ seal: seq, records, ...(evicted === 0 ? {} : { evicted_jobs: evicted }) } satisfies SealLine)}\n`);
      await file.close();
      await rename(tmp, this.path);
      return records + evicted;
    } catch (err) {
      await file.close().catch(() => undefined);
      await rm(tmp, { force: true });
      throw err;
    }
  }
}

/** The checkpoint at `path` if it is usable for this stream and these machines; otherwise null. */
export async function readCheckpoint(path: string, streamCreated: string): Promise<Checkpoint | null> {
  let input: ReturnType<typeof createReadStream>;
  try {
    input = createReadStream(path, { highWaterMark: 1 << 22 });
    await new Promise<void>((resolve, reject) => input.once('open', () => resolve()).once('error', reject));
  } catch {
    return null;
  }
  try {
    let header: CheckpointHeader | undefined;
    const byJob = new Map<string, JobRecord>();
    let pending: JobRecord[] = [];
    let pendingEvicted: EvictedTuple[] = [];
    const evictedById = new Map<string, EvictedLine>();
    let pendingAggregates: readonly AggregateRecord[] | undefined;
    let aggregates: readonly AggregateRecord[] = [];
    let seq: number | undefined;
    let recordsInFile = 0;
    let sealedBytes = 0;
    const line = (text: string, endOffset: number): boolean => {
      if (!header) {
        header = JSON.parse(text) as CheckpointHeader;
        return header.format === FORMAT && header.stream_created === streamCreated && JSON.stringify(header.versions) === JSON.stringify(MACHINE_VERSIONS);
      }
      const parsed = JSON.parse(text) as RecordLine[] | SealLine | AggregatesLine | EvictedLines;
      if (Array.isArray(parsed)) {
        for (const item of parsed) pending.push(fromLine(item));
        return true;
      }
      if ('aggregates' in parsed) {
        pendingAggregates = parsed.aggregates;
        return true;
      }
      if ('evicted' in parsed) {
        pendingEvicted.push(...parsed.evicted);
        return true;
      }
      // A seal whose count does not match its segment: a foreign or damaged file.
      if (parsed.records !== pending.length || (parsed.evicted_jobs ?? 0) !== pendingEvicted.length) return false;
      for (const record of pending) byJob.set(record.jobId, record);
      for (const tuple of pendingEvicted) {
        // Its earlier record (in this segment or before) ends here; a later segment's record is its body read back and changed.
        if (tuple[0] !== 0) byJob.delete(tuple[0]);
        evictedById.set(tuple[1][0]!, fromEvictedTuple(tuple));
      }
      recordsInFile += pendingEvicted.length;
      pendingEvicted = [];
      if (pendingAggregates !== undefined) aggregates = pendingAggregates;
      pendingAggregates = undefined;
      recordsInFile += pending.length;
      pending = [];
      seq = parsed.seal;
      sealedBytes = endOffset;
      return true;
    };
    // Lines are split on the bytes (a newline byte never occurs inside UTF-8 text).
    let rest: Buffer = Buffer.alloc(0);
    let restOffset = 0;
    for await (const chunk of input as AsyncIterable<Buffer>) {
      const data = rest.length === 0 ? chunk : Buffer.concat([rest, chunk]);
      let start = 0;
      for (let nl = data.indexOf(10); nl >= 0; nl = data.indexOf(10, start)) {
        if (nl > start && !line(data.toString('utf8', start, nl), restOffset + nl + 1)) return null;
        start = nl + 1;
      }
      restOffset += start;
      rest = data.subarray(start);
    }
    // `rest` is a line without its newline: part of a torn segment, never sealed.
    if (seq === undefined) return null;
    return { seq, records: [...byJob.values()], aggregates, evicted: [...evictedById.values()], recordsInFile, sealedBytes };
  } catch {
    // A torn segment's half line, or a foreign file: what was sealed before it stands, unless
    // nothing was. A parse error inside the sealed part cannot be told apart, so fold from zero.
    return null;
  } finally {
    input.destroy();
  }
}
