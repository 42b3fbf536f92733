/**
 * BullMQ, the peer: the same workloads as docket's rows, on a Redis this harness started itself.
 * Completed jobs are kept (STACK.md: with removeOnComplete, waitUntilFinished failed about once in
 * 7,000 waits), and every run starts from an empty Redis (FLUSHALL).
 */
import { Queue, QueueEvents, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { latencyFigures, measured, type Measurement } from './harness.js';
import { rssBytesOf, type RedisServer } from './procs.js';
import { jobParams } from './workload.js';

export function connection(redis: RedisServer): { host: string; port: number; maxRetriesPerRequest: null } {
  return { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
}

export async function flush(redis: RedisServer): Promise<void> {
  const client = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
  await client.connect();
  await client.flushall();
  client.disconnect();
}

function roles(redis: RedisServer): Record<string, number> {
  return { bench: process.pid, redis: redis.pid };
}

function jobsOf(n: number, offset: number): { name: string; data: { i: number; image: string } }[] {
  return Array.from({ length: n }, (_, i) => ({ name: 'noop', data: jobParams(offset + i) }));
}

/** addBulk of `n` jobs in chunks, one chunk at a time. */
export async function addBulk(queue: Queue, n: number, chunk: number): Promise<void> {
  for (let offset = 0; offset < n; offset += chunk) await queue.addBulk(jobsOf(Math.min(chunk, n - offset), offset));
}

export async function bulkSubmit(redis: RedisServer, n: number, chunk: number): Promise<Measurement> {
  await flush(redis);
  const queue = new Queue('bench-bulk', { connection: connection(redis) });
  await queue.waitUntilReady();
  try {
    const m = await measured(roles(redis), () => addBulk(queue, n, chunk));
    return { values: { rate: n / m.seconds }, cpu: m.cpu, extra: { jobs: n, chunk } };
  } finally {
    await queue.close();
  }
}

/** Starts a no-op worker, then submits `n` jobs in chunks; done when the worker has completed all `n`. */
export async function endToEnd(redis: RedisServer, n: number, concurrency: number, chunk: number): Promise<Measurement> {
  await flush(redis);
  const queue = new Queue('bench-e2e', { connection: connection(redis) });
  await queue.waitUntilReady();
  let completed = 0;
  let failed = 0;
  let done!: () => void;
  const allDone = new Promise<void>((resolve) => (done = resolve));
  const worker = new Worker('bench-e2e', async () => null, { connection: connection(redis), concurrency });
  worker.on('completed', () => {
    if (++completed === n) done();
  });
  worker.on('failed', () => void failed++);
  await worker.waitUntilReady();
  try {
    const m = await measured(roles(redis), async () => {
      await addBulk(queue, n, chunk);
      await allDone;
    });
    if (failed > 0) throw new Error(`${failed} BullMQ jobs failed`);
    return { values: { rate: n / m.seconds }, cpu: m.cpu, extra: { jobs: n, concurrency, chunk } };
  } finally {
    await worker.close();
    await queue.close();
  }
}

/** `n` jobs one after another: add, then wait until finished (QueueEvents), milliseconds each. */
export async function latency(redis: RedisServer, n: number, warmup: number): Promise<Measurement> {
  await flush(redis);
  const queue = new Queue('bench-latency', { connection: connection(redis) });
  const events = new QueueEvents('bench-latency', { connection: connection(redis) });
  const worker = new Worker('bench-latency', async () => null, { connection: connection(redis), concurrency: 1 });
  await Promise.all([queue.waitUntilReady(), events.waitUntilReady(), worker.waitUntilReady()]);
  try {
    const samples: number[] = [];
    const m = await measured(roles(redis), async () => {
      for (let i = 0; i < n + warmup; i++) {
        const t0 = performance.now();
        const job = await queue.add('noop', { i });
        await job.waitUntilFinished(events, 30_000);
        samples.push(performance.now() - t0);
      }
    });
    const { values, extra } = latencyFigures(samples, warmup, n);
    return { values, cpu: m.cpu, extra };
  } finally {
    await worker.close();
    await events.close();
    await queue.close();
  }
}

/**
 * Claim throughput: a worker with concurrency 100 on a queue already holding jobs; the rate
 * between its first and its `k`-th handled job (start-up excluded).
 */
export async function claimRate(redis: RedisServer, queueName: string, k: number): Promise<number> {
  let handled = 0;
  let first = 0;
  let done!: (ms: number) => void;
  const finished = new Promise<number>((resolve) => (done = resolve));
  const worker = new Worker(
    queueName,
    async () => {
      if (handled === 0) first = performance.now();
      if (++handled === k) done(performance.now() - first);
      return null;
    },
    { connection: connection(redis), concurrency: 100, autorun: true },
  );
  try {
    const ms = await finished;
    return ((k - 1) / ms) * 1000;
  } finally {
    await worker.close(true);
  }
}

export async function redisUsedMemory(redis: RedisServer): Promise<{ rss: number; used: number }> {
  const client = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
  await client.connect();
  const info = await client.info('memory');
  client.disconnect();
  const used = Number(/used_memory:(\d+)/.exec(info)?.[1] ?? NaN);
  return { rss: rssBytesOf(redis.pid) ?? NaN, used };
}
