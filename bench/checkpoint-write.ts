/**
 * A checkpoint's whole rewrite of N queued jobs (all of them go to the cold block): wall time,
 * CPU, the peak of the V8 heap and of array buffers while it writes (sampled every 20 ms), and
 * how long it held the event loop at once (the delay of a 1 ms timer: max and p99), three times
 * over the same job store. A whole rewrite runs on the node's main thread between
 * commands, and what it allocates stays resident until a collection that an idle node may not
 * run (README "Performance", memory per queued job).
 *
 *   node --expose-gc --import tsx bench/checkpoint-write.ts [jobs=1000000]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { CheckpointFile, readCheckpoint } from '../src/store/checkpoints.js';
import { JobStore } from '../src/store/job-store.js';
import { at, jobEvent } from '../test/support/arbitraries.js';

const jobs = Number(process.argv[2] ?? 1_000_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  process.stderr.write('run with node --expose-gc --import tsx bench/checkpoint-write.ts\n');
  process.exit(2);
}
const STREAM_CREATED = '2026-11-28T00:00:00.000Z';
const MB = 1e6;

const store = new JobStore();
for (let i = 0; i < jobs; i++) {
  const jobId = `job-${i}`;
  const submitted = jobEvent('job.submitted', { job_id: jobId, key: null, params: { i, image: `s3://uploads/${i}.jpg` }, priority: i % 3, position: null, run_at: at(0), max_attempts: 1, backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 }, attempt: 1, retry_of: null, waiting: false });
  store.apply({ seq: i + 1, queue: 'q', jobId, event: submitted });
}
const dir = await mkdtemp(join(tmpdir(), 'docket-checkpoint-write-'));
try {
  for (let round = 0; round < 3; round++) {
    const path = join(dir, `checkpoint-${round}.json`);
    // A file of its own: its first write is whole.
    const file = new CheckpointFile(path, STREAM_CREATED);
    for (let i = 0; i < jobs; i++) file.changed(`job-${i}`);
    gc();
    const before = process.memoryUsage();
    let peakHeap = before.heapUsed;
    let peakArrayBuffers = before.arrayBuffers;
    const sampler = setInterval(() => {
      const m = process.memoryUsage();
      peakHeap = Math.max(peakHeap, m.heapUsed);
      peakArrayBuffers = Math.max(peakArrayBuffers, m.arrayBuffers);
    }, 20);
    const loop = monitorEventLoopDelay({ resolution: 1 });
    loop.enable();
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    await file.write(jobs, store);
    const cpu = process.cpuUsage(cpu0);
    const ms = performance.now() - t0;
    loop.disable();
    clearInterval(sampler);
    const read = await readCheckpoint(path, STREAM_CREATED);
    if (read?.cold?.size !== jobs) throw new Error(`the checkpoint holds ${read?.cold?.size ?? 0} cold rows, not ${jobs}`);
    read.cold.close();
    process.stdout.write(
      `${JSON.stringify({ jobs, wall_ms: Math.round(ms), cpu_ms: Math.round((cpu.user + cpu.system) / 1000), heap_mb: { before: Math.round(before.heapUsed / MB), peak: Math.round(peakHeap / MB) }, array_buffers_mb: { before: Math.round(before.arrayBuffers / MB), peak: Math.round(peakArrayBuffers / MB) }, loop_held_ms: { max: Math.round(loop.max / 1e6), p99: Math.round(loop.percentile(99) / 1e6) } })}\n`,
    );
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
