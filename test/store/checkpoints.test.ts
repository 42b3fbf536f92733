/**
 * The checkpoint file on its own (no NATS): segments append only what changed, a later segment
 * wins, a torn segment is ignored and cut off, the file is rewritten whole when it outgrows the
 * live records, and a file for another stream is not used.
 */
import { appendFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { INITIAL_JOB_STATE, type JsonObject } from '../../machines/index.js';
import { CheckpointFile, checkpointRecords, readCheckpoint } from '../../src/store/checkpoints.js';
import { JobStore, type EvictedLine, type JobRecord } from '../../src/store/job-store.js';
import { JOB_ID, QUEUE, at, jobEvent, makeJobEventSequenceArb } from '../support/arbitraries.js';
import { fingerprintOf } from '../../src/store/evicted-index.js';
import { FileBodies } from '../../src/store/cold-jobs.js';

const STREAM_CREATED = '2026-11-26T00:00:00.000Z';

/** A stand-in job store: records by id, replaced on change as the real one does. */
class Records {
  readonly jobs = new Map<string, JobRecord>();
  get size(): number {
    return this.jobs.size;
  }
  get(jobId: string): JobRecord | undefined {
    return this.jobs.get(jobId);
  }
  warmValues(): IterableIterator<JobRecord> {
    return this.jobs.values();
  }
  get warmSize(): number {
    return this.jobs.size;
  }
  readonly cold = undefined;
  readonly evictedCount = 0;
  evictedLines(): EvictedLine[] {
    return [];
  }
  put(file: CheckpointFile, jobId: string, seq: number): void {
    this.jobs.set(jobId, { jobId, queue: "q", state: INITIAL_JOB_STATE, seq, submitSeq: seq, submitId: `e-${jobId}`, commandHash: null, later: [] });
    file.changed(jobId);
  }
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'docket-checkpoint-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const seqs = (records: readonly JobRecord[]) => Object.fromEntries(records.map((r) => [r.jobId, r.seq]));
const lineCount = async (path: string) => (await readFile(path, 'utf8')).split('\n').filter(Boolean).length;
/** A queued job's submit: no key, one attempt, the defaults but for what a test sets. */
const submittedEvent = (jobId: string, params: JsonObject, priority: number, options: { queue?: string } = {}) =>
  jobEvent('job.submitted', { job_id: jobId, key: null, params, priority, position: null, run_at: at(0), max_attempts: 1, backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 }, attempt: 1, retry_of: null, waiting: false }, options);

/**
 * How many items a write takes from `counted` between two turns of the event loop, at most,
 * while `onTurn` runs once a turn (commands beside the write). Turns run until `during` settles.
 */
async function longestRunBetweenTurns(during: (counted: <T>(items: Iterable<T>) => Generator<T>) => Promise<unknown>, onTurn: () => void = () => undefined): Promise<number> {
  let sinceTurn = 0;
  let longest = 0;
  let running = true;
  const turn = () => {
    if (!running) return;
    sinceTurn = 0;
    onTurn();
    setImmediate(turn);
  };
  setImmediate(turn);
  function* counted<T>(items: Iterable<T>): Generator<T> {
    for (const item of items) {
      longest = Math.max(longest, ++sinceTurn);
      yield item;
    }
  }
  try {
    await during(counted);
  } finally {
    running = false;
  }
  return longest;
}

describe('checkpoint file', () => {
  test('the first write is whole; later writes append only the changed records, and the latest record wins', async () => {
    const path = join(dir, 'checkpoint.json');
    const file = new CheckpointFile(path, STREAM_CREATED, { ratio: 100, slack: 0 });
    const store = new Records();
    for (let i = 1; i <= 5; i++) store.put(file, `j${i}`, i);
    expect(await file.write(5, store)).toEqual({ records: 5, full: true });
    store.put(file, 'j2', 6);
    store.put(file, 'j6', 7);
    expect(await file.write(7, store)).toEqual({ records: 2, full: false });
    expect(await file.write(7, store)).toEqual({ records: 0, full: false });

    const read = await readCheckpoint(path, STREAM_CREATED);
    expect(read?.seq).toBe(7);
    expect(read?.recordsInFile).toBe(7);
    expect(seqs(read!.records)).toEqual({ j1: 1, j2: 6, j3: 3, j4: 4, j5: 5, j6: 7 });
  });

  test('a torn segment is ignored on read and cut off before the next append', async () => {
    const path = join(dir, 'checkpoint.json');
    const file = new CheckpointFile(path, STREAM_CREATED, { ratio: 100, slack: 0 });
    const store = new Records();
    store.put(file, 'j1', 1);
    await file.write(1, store);
    const sealed = await readFile(path, 'utf8');
    // A crash mid-segment: a whole chunk line without its seal, then half a line.
    const chunkLine = sealed.split('\n')[1]!;
    await appendFile(path, `${chunkLine.replace('"j1","q",1', '"j1","q",99')}\n[["j9","qu`);

    const next = new CheckpointFile(path, STREAM_CREATED, { ratio: 100, slack: 0 });
    const read = await next.read();
    expect(read?.seq).toBe(1);
    expect(seqs(read!.records)).toEqual({ j1: 1 });
    expect(await readFile(path, 'utf8')).toBe(sealed);

    const restored = new Records();
    for (const r of read!.records) restored.jobs.set(r.jobId, r);
    restored.put(next, 'j2', 2);
    expect(await next.write(2, restored)).toEqual({ records: 1, full: false });
    expect(seqs((await readCheckpoint(path, STREAM_CREATED))!.records)).toEqual({ j1: 1, j2: 2 });
  });

  test('a file holding more than ratio x live records (plus slack) is rewritten whole', async () => {
    const path = join(dir, 'checkpoint.json');
    const file = new CheckpointFile(path, STREAM_CREATED, { ratio: 2, slack: 0 });
    const store = new Records();
    for (let i = 1; i <= 3; i++) store.put(file, `j${i}`, i);
    expect((await file.write(3, store)).full).toBe(true);
    // 3 in the file + 3 changed = 6 <= 2 x 3: a segment.
    for (let i = 1; i <= 3; i++) store.put(file, `j${i}`, 3 + i);
    expect(await file.write(6, store)).toEqual({ records: 3, full: false });
    // 6 + 1 > 6: whole again, so the file holds each job once.
    store.put(file, 'j1', 7);
    expect(await file.write(7, store)).toEqual({ records: 3, full: true });
    expect(await lineCount(path)).toBe(4); // header, one chunk line, the aggregates, seal
    expect(seqs((await readCheckpoint(path, STREAM_CREATED))!.records)).toEqual({ j1: 7, j2: 5, j3: 6 });
  });

  test('segments holding more than segmentShare of the live records (plus slack) are folded into a whole rewrite, also counted across a read', async () => {
    const path = join(dir, 'checkpoint.json');
    const policy = { ratio: 100, slack: 0, segmentShare: 0.5 };
    const file = new CheckpointFile(path, STREAM_CREATED, policy);
    const store = new Records();
    for (let i = 1; i <= 4; i++) store.put(file, `j${i}`, i);
    expect((await file.write(4, store)).full).toBe(true);
    store.put(file, 'j1', 5);
    expect(await file.write(5, store)).toEqual({ records: 1, full: false });
    // A new file object reads the segment count back: 1 + 2 changes > 0.5 x 5 live.
    const next = new CheckpointFile(path, STREAM_CREATED, policy);
    expect((await next.read())?.recordsInSegments).toBe(1);
    store.put(next, 'j2', 6);
    store.put(next, 'j5', 7);
    expect(await next.write(7, store)).toEqual({ records: 5, full: true });
    expect((await readCheckpoint(path, STREAM_CREATED))?.recordsInSegments).toBe(0);
  });

  test('an evicted job: a segment ends its earlier record and keeps its compact entry; a whole rewrite keeps the entry alone', async () => {
    const path = join(dir, 'checkpoint.json');
    const file = new CheckpointFile(path, STREAM_CREATED, { ratio: 100, slack: 0 });
    const store = new JobStore();
    store.onChange((change) => file.changed(change.after.jobId));
    store.onEvict((eviction) => file.evicted(eviction.record.jobId, eviction.line));
    const submitted = (jobId: string) => submittedEvent(jobId, {}, 5);
    store.apply({ seq: 1, queue: QUEUE, jobId: 'gone', event: submitted('gone') });
    store.apply({ seq: 2, queue: QUEUE, jobId: 'gone', event: jobEvent('job.cancelled', { job_id: 'gone', reason: null } as never) });
    store.apply({ seq: 3, queue: QUEUE, jobId: 'kept', event: submitted('kept') });
    expect((await file.write(3, store)).full).toBe(true);
    store.evict('gone', 'cancelled');
    expect(await file.write(3, store)).toEqual({ records: 0, full: false });

    const read = (await readCheckpoint(path, STREAM_CREATED))!;
    expect(checkpointRecords(read).map((r) => r.jobId)).toEqual(['kept']);
    expect(read.evicted).toEqual([{ fingerprints: [fingerprintOf('gone')], queue: QUEUE, status: 'cancelled', outcome: 'cancelled', positions: [1, 2] }]);
    const restored = new JobStore();
    for (const line of read.evicted) restored.restoreEvicted(line);
    expect(restored.statusOf('gone')).toBe('cancelled');
    expect(restored.get('gone')).toBeUndefined();

    // Whole again (a new file object knows nothing of the old): the entry alone, no job id.
    const whole = new CheckpointFile(join(dir, 'whole.json'), STREAM_CREATED);
    await whole.write(3, store);
    const again = (await readCheckpoint(join(dir, 'whole.json'), STREAM_CREATED))!;
    expect(checkpointRecords(again).map((r) => r.jobId)).toEqual(['kept']);
    expect(again.evicted).toEqual(read.evicted);
    expect(await readFile(join(dir, 'whole.json'), 'utf8')).not.toContain('"gone"');
  });

  test('a checkpoint of another stream, or with a seal that miscounts its segment, is not used', async () => {
    const path = join(dir, 'checkpoint.json');
    const file = new CheckpointFile(path, STREAM_CREATED);
    const store = new Records();
    store.put(file, 'j1', 1);
    await file.write(1, store);
    expect(await readCheckpoint(path, '2026-11-27T00:00:00.000Z')).toBeNull();
    const chunkLine = (await readFile(path, 'utf8')).split('\n')[1]!;
    await appendFile(path, `${chunkLine}\n${JSON.stringify({ seal: 2, records: 2 })}\n`);
    expect(await readCheckpoint(path, STREAM_CREATED)).toBeNull();
    expect(await readCheckpoint(join(dir, 'missing.json'), STREAM_CREATED)).toBeNull();
  });

  test("cold rows' lines stay in the file: read in blocks in any order, a line longer than a block whole, and still after a whole rewrite renames a new file over it", async () => {
    const path = join(dir, 'checkpoint.json');
    const store = new JobStore();
    const file = new CheckpointFile(path, STREAM_CREATED);
    const n = 3_000;
    for (let i = 0; i < n; i++) {
      const jobId = `cold-${i}`;
      // One line (job 1,500) is longer than a read block (64 KiB).
      const params = i === 1_500 ? { big: 'x'.repeat(100_000) } : { i, image: `s3://uploads/${i}.jpg` };
      store.apply({ seq: i + 1, queue: QUEUE, jobId, event: submittedEvent(jobId, params, 5) });
      file.changed(jobId);
    }
    await file.write(n, store);
    const read = (await readCheckpoint(path, STREAM_CREATED))!;
    const cold = read.cold!;
    expect(cold.size).toBe(n);
    expect(cold.columns.bodies).toBeInstanceOf(FileBodies);
    const rows = Array.from({ length: n }, (_, row) => row);
    const expectRows = (order: number[]) => {
      for (const row of order) {
        const record = cold.recordAt(row);
        expect(record).toEqual(store.get(record.jobId));
        expect(cold.jobIdAt(row)).toBe(record.jobId);
      }
    };
    expectRows(rows);
    expectRows([...rows].reverse());
    expectRows(rows.filter((row) => row % 7 === 0).concat(rows.filter((row) => row % 7 === 3)));

    // A node restored from it writes a whole checkpoint again: the rows are copied from the old
    // file (renamed over meanwhile), and the old file is still read from.
    const restored = new JobStore();
    restored.restoreCold(cold);
    await new CheckpointFile(path, STREAM_CREATED).write(n, restored);
    expectRows([...rows].reverse());
    const again = (await readCheckpoint(path, STREAM_CREATED))!;
    expect(checkpointRecords(again)).toEqual(checkpointRecords(read));
    again.cold!.close();

    cold.close();
    expect(() => cold.recordAt(0)).toThrow(/closed/);
  });

  test("a whole rewrite of cold rows and new records of two queues: each queue's rows in queue order, a line longer than the write batch (1 MiB) whole", async () => {
    const path = join(dir, 'checkpoint.json');
    const submitTo = (store: JobStore, file: CheckpointFile, queue: string, i: number, seq: number) => {
      const jobId = `${queue}-${i}`;
      const params = i === 7 ? { big: 'x'.repeat(1_200_000) } : { i };
      store.apply({ seq, queue, jobId, event: submittedEvent(jobId, params, (i * 7) % 5, { queue }) });
      file.changed(jobId);
    };
    const first = new JobStore();
    const firstFile = new CheckpointFile(path, STREAM_CREATED);
    for (let i = 0; i < 400; i++) submitTo(first, firstFile, 'alpha', i, i + 1);
    await firstFile.write(400, first);
    const read = (await readCheckpoint(path, STREAM_CREATED))!;

    // Restored cold, then new jobs in both queues: the next whole write copies rows and makes lines.
    const restored = new JobStore();
    restored.restoreCold(read.cold!);
    const file = new CheckpointFile(path, STREAM_CREATED);
    for (let i = 400; i < 700; i++) submitTo(restored, file, i % 2 === 0 ? 'alpha' : 'beta', i, i + 1);
    await file.write(700, restored);
    const again = (await readCheckpoint(path, STREAM_CREATED))!;
    const cold = again.cold!;
    expect(cold.size).toBe(700);
    const records = checkpointRecords(again);
    expect(records.find((r) => r.jobId === 'alpha-7')!.state.job.context.params).toEqual({ big: 'x'.repeat(1_200_000) });
    expect(new Map(records.map((r) => [r.jobId, r]))).toEqual(new Map([...checkpointRecords(read), ...[...restored.warmValues()]].map((r) => [r.jobId, r])));
    const { queues, ranges } = cold.columns;
    expect([...queues].sort()).toEqual(['alpha', 'beta']);
    queues.forEach((queue, q) => {
      const [from, to] = ranges[q]!;
      const rows = Array.from({ length: to - from }, (_, k) => cold.recordAt(from + k));
      expect(rows.every((r) => r.queue === queue)).toBe(true);
      const key = (r: JobRecord) => [r.state.job.context.priority, r.submitSeq];
      const sorted = [...rows].sort((a, b) => key(a)[0]! - key(b)[0]! || key(a)[1]! - key(b)[1]!);
      expect(rows.map((r) => r.jobId)).toEqual(sorted.map((r) => r.jobId));
    });
    read.cold!.close();
    cold.close();
  });

  test('a whole rewrite of 50,000 queued jobs reads them with turns of the loop between, and jobs submitted and claimed during it come back as the store holds them after the next write', async () => {
    const path = join(dir, 'checkpoint.json');
    let counted: <T>(items: Iterable<T>) => Generator<T> = function* (items) {
      yield* items;
    };
    class CountingStore extends JobStore {
      override warmValues(): IterableIterator<JobRecord> {
        return counted(super.warmValues());
      }
    }
    const store = new CountingStore();
    const file = new CheckpointFile(path, STREAM_CREATED);
    let seq = 0;
    const submit = (jobId: string) => {
      store.apply({ seq: ++seq, queue: QUEUE, jobId, event: submittedEvent(jobId, { jobId }, seq % 3) });
      file.changed(jobId);
    };
    const claim = (jobId: string) => {
      store.apply({ seq: ++seq, queue: QUEUE, jobId, event: { ...jobEvent('job.claimed', { run_id: `r-${jobId}`, worker: 'w', host: 'h', pid: 1, version: 'v', lease_ms: 30_000 }), aggregate: { kind: 'job', id: jobId } } });
      file.changed(jobId);
    };
    const jobs = 50_000;
    for (let i = 0; i < jobs; i++) submit(`job-${i}`);

    // Commands beside the write: one a turn, a submit or a claim of a job it is writing.
    let turns = 0;
    const longestRun = await longestRunBetweenTurns(
      (count) => {
        counted = count;
        return file.write(seq, store);
      },
      () => {
        turns += 1;
        if (turns % 2 === 0) submit(`during-${turns}`);
        else claim(`job-${(turns * 7919) % jobs}`);
      },
    );
    // Unpaced, the write read every queued job at once, with no turn between (it had nothing to
    // write until their lines); paced, a turn comes every 0.5 ms of its CPU: a few hundred jobs.
    expect(longestRun).toBeLessThan(jobs / 5);
    await file.write(seq, store);
    const read = (await readCheckpoint(path, STREAM_CREATED))!;
    expect(new Map(checkpointRecords(read).map((r) => [r.jobId, r]))).toEqual(new Map([...store.warmValues()].map((r) => [r.jobId, r])));
    read.cold?.close();
  });

  test('a whole rewrite of a restored cold block, with commands reading cold jobs throughout, writes every cold line as it was', async () => {
    const path = join(dir, 'checkpoint.json');
    const first = new JobStore();
    const firstFile = new CheckpointFile(path, STREAM_CREATED);
    const jobs = 30_000;
    for (let i = 0; i < jobs; i++) {
      const jobId = `job-${i}`;
      first.apply({ seq: i + 1, queue: QUEUE, jobId, event: submittedEvent(jobId, { i, pad: 'x'.repeat(i % 97) }, 0) });
      firstFile.changed(jobId);
    }
    await firstFile.write(jobs, first);
    const read = (await readCheckpoint(path, STREAM_CREATED))!;
    const expected = new Map(checkpointRecords(read).map((r) => [r.jobId, r]));
    expect(read.cold!.size).toBe(jobs);

    // Restored cold; the next write is whole, and copies the rows' lines from the file while
    // commands read other cold jobs (each read may reuse the block a line being copied is in).
    const store = new JobStore();
    store.restoreCold(read.cold!);
    const file = new CheckpointFile(path, STREAM_CREATED);
    let reads = 0;
    let writing = true;
    const beside = () => {
      if (!writing) return;
      for (let k = 0; k < 8; k++) store.get(`job-${(++reads * 7919) % jobs}`);
      setImmediate(beside);
    };
    setImmediate(beside);
    await file.write(jobs, store);
    writing = false;
    const again = (await readCheckpoint(path, STREAM_CREATED))!;
    expect(reads).toBeGreaterThan(0);
    expect(new Map(checkpointRecords(again).map((r) => [r.jobId, r]))).toEqual(expected);
    read.cold!.close();
    again.cold?.close();
  });

  test('a whole rewrite of 20,000 evicted jobs makes their lines with turns of the loop between, and they come back as they were', async () => {
    const path = join(dir, 'checkpoint.json');
    let counted: <T>(items: Iterable<T>) => Generator<T> = function* (items) {
      yield* items;
    };
    class CountingStore extends JobStore {
      override evictedLines(): Iterable<EvictedLine> {
        return counted(super.evictedLines());
      }
    }
    const store = new CountingStore();
    const jobs = 20_000;
    let seq = 0;
    for (let i = 0; i < jobs; i++) {
      const jobId = `done-${i}`;
      store.apply({ seq: ++seq, queue: QUEUE, jobId, event: submittedEvent(jobId, { i }, 0) });
      store.apply({ seq: ++seq, queue: QUEUE, jobId, event: { ...jobEvent('job.cancelled', { reason: null }), aggregate: { kind: 'job', id: jobId } } });
      store.evict(jobId, 'cancelled');
    }
    const file = new CheckpointFile(path, STREAM_CREATED);
    const longestRun = await longestRunBetweenTurns((count) => {
      counted = count;
      return file.write(seq, store);
    });
    // Before, every evicted job was made a line before the first was written (20,000 with no
    // turn between); now each is made as it is written, with a turn at least at each chunk's write.
    expect(longestRun).toBeLessThan(jobs / 5);
    const read = (await readCheckpoint(path, STREAM_CREATED))!;
    expect(read.evicted).toHaveLength(jobs);
    expect(read.evicted).toEqual([...store.evictedLines()].map(({ fingerprints, queue, status, outcome, positions }) => ({ fingerprints, queue, status, outcome, positions })));
  });

  test('a format 7 file (lines only, no cold block) is still read; format 6 is not', async () => {
    const path = join(dir, 'checkpoint.json');
    const file = new CheckpointFile(path, STREAM_CREATED);
    const store = new Records();
    store.put(file, 'j1', 1);
    await file.write(1, store);
    const [header, ...rest] = (await readFile(path, 'utf8')).split('\n');
    const asFormat = async (format: number) => {
      const { endian: _endian, ...old } = JSON.parse(header!) as Record<string, unknown>;
      await writeFile(path, [JSON.stringify({ ...old, format }), ...rest].join('\n'));
      return readCheckpoint(path, STREAM_CREATED);
    };
    expect(seqs((await asFormat(7))!.records)).toEqual({ j1: 1 });
    expect(await asFormat(6)).toBeNull();
  });

  test('property: records folded from random histories come back from the file equal, field for field', async () => {
    const path = join(dir, 'roundtrip.json');
    await fc.assert(
      fc.asyncProperty(fc.array(makeJobEventSequenceArb(), { minLength: 1, maxLength: 4 }), async (histories) => {
        const store = new JobStore();
        const file = new CheckpointFile(path, STREAM_CREATED);
        let seq = 0;
        for (const [i, events] of histories.entries()) {
          const jobId = `${JOB_ID}-${i}`;
          for (const event of events) {
            const e = event.type === 'job.submitted' ? { ...event, data: { ...event.data, job_id: jobId } } : event;
            if (store.apply({ seq: ++seq, queue: QUEUE, jobId, event: e }) === 'applied') file.changed(jobId);
          }
        }
        await file.write(seq, store);
        const read = await readCheckpoint(path, STREAM_CREATED);
        const byId = new Map(checkpointRecords(read!).map((r) => [r.jobId, r]));
        expect(byId.size).toBe(store.size);
        for (const record of store.values()) expect(byId.get(record.jobId)).toEqual(record);
      }),
      { numRuns: 60 },
    );
  });

  test('removed jobs (job.removed from queued and from succeeded) come back removed, field for field', async () => {
    const path = join(dir, 'removed.json');
    const store = new JobStore();
    const file = new CheckpointFile(path, STREAM_CREATED);
    let seq = 0;
    const submit = (jobId: string) =>
      jobEvent('job.submitted', { job_id: jobId, key: 'k', params: {}, priority: 5, position: null, run_at: at(0), max_attempts: 1, backoff: { base_ms: 1000, max_ms: 3_600_000, jitter: 0.2 }, attempt: 1, retry_of: null, waiting: false });
    const histories: Record<string, ReturnType<typeof jobEvent>[]> = {
      queued: [submit('queued'), jobEvent('job.removed', { reason: 'deleted' }, { time: at(1000) })],
      ended: [
        submit('ended'),
        jobEvent('job.claimed', { run_id: 'r1', worker: 'w', host: 'h', pid: 1, version: '1', lease_ms: 30_000 }, { time: at(1000) }),
        jobEvent('job.succeeded', { run_id: 'r1', result: { n: 1 } }, { time: at(2000) }),
        jobEvent('job.removed', { reason: 'cleaned' }, { time: at(3000) }),
      ],
    };
    for (const [jobId, events] of Object.entries(histories)) {
      for (const event of events) expect(store.apply({ seq: ++seq, queue: QUEUE, jobId, event })).toBe('applied');
      file.changed(jobId);
    }
    await file.write(seq, store);
    const read = await readCheckpoint(path, STREAM_CREATED);
    const byId = new Map(read!.records.map((r) => [r.jobId, r]));
    for (const jobId of Object.keys(histories)) {
      expect(byId.get(jobId)?.state.job.value).toBe('removed');
      expect(byId.get(jobId)).toEqual(store.get(jobId));
    }
    expect(byId.get('ended')?.state.run.value).toBe('completed');
  });
});
