/**
 * Cold jobs (src/store/cold-jobs.ts): queued jobs restored from a checkpoint stay as its bytes
 * until something reads them. A node restored that way must answer as a node that folded the
 * log from zero: the same queue order (snapshot and the claims it hands out, merged with jobs
 * submitted after the restart), list, progress and records, also after commands touched cold
 * jobs, and again after the next checkpoint copied the cold rows into a whole rewrite.
 */
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { captureProjections, caughtUp, closeTestFile, connectTestClients, startTrackedNode, uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const clock = new ManualClock(Date.parse('2026-04-01T08:00:00.000Z'));
const dirs: string[] = [];

beforeAll(async () => {
  server = await startNatsServer();
  ({ client, nc, jsm } = await connectTestClients(server, 'cold-restore-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, server });
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'docket-cold-'));
  dirs.push(dir);
  return dir;
}

/** Takes every ready job of the queue from the node's queue order, in the order handed out. */
function takeAll(node: DocketNode, queue: string): string[] {
  const taken: string[] = [];
  for (let id = node.queueOrder.take(queue); id !== undefined; id = node.queueOrder.take(queue)) taken.push(id);
  return taken;
}

describe('cold jobs restored from a checkpoint', () => {
  test('answer as a fold from zero: order, claims, list, progress and records, before and after commands touch them', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const liveDir = await tempDir();
    const live = await startTrackedNode(server, { clock, nodeName: 'cold-live', dataDir: liveDir });
    let cancelled: string;
    let read: string;
    try {
      // Priorities interleaved (so queue order is not submit order), a few delayed and keyed
      // jobs (restored as objects), and jobs with a concurrency key.
      const items = Array.from({ length: 300 }, (_, i) => ({
        queue,
        params: { i },
        priority: [5, 1, 9][i % 3]!,
        ...(i % 50 === 7 ? { delay_ms: 60_000 } : {}),
        ...(i % 40 === 3 ? { key: `k${i}` } : {}),
        ...(i % 10 === 4 ? { concurrency_key: `c${i % 3}` } : {}),
      }));
      const { jobs } = await client.submitBatch(items);
      expect(jobs.every((j) => j.ok)).toBe(true);
      const ids = jobs.map((j) => (j.ok ? j.job_id : ''));
      cancelled = ids[10]!;
      read = ids[20]!;
      await caughtUp(live, jsm);
      await live.checkpoint();
    } finally {
      await live.close();
    }
    const coldDir = await tempDir();
    await mkdir(coldDir, { recursive: true });
    await copyFile(join(liveDir, 'checkpoint.json'), join(coldDir, 'checkpoint.json'));

    const restored = await startTrackedNode(server, { clock, nodeName: 'cold-restored', dataDir: liveDir });
    const zero = await startTrackedNode(server, { clock, nodeName: 'cold-zero' });
    try {
      // Delayed (6) and keyed (8) jobs are objects; the rest (286) are cold.
      expect(restored.store.cold?.size).toBe(286);
      expect(restored.store.size).toBe(300);
      expect(restored.queueOrder.snapshot(queue)).toEqual(zero.queueOrder.snapshot(queue));
      expect(restored.store.cold?.size).toBe(286);
      expect(captureProjections(restored, [queue])).toEqual(captureProjections(zero, [queue]));
    } finally {
      await restored.close();
      await zero.close();
    }

    // Commands on cold jobs, and jobs submitted after the restart, before and after them in order.
    const again = await startTrackedNode(server, { clock, nodeName: 'cold-again', dataDir: coldDir });
    try {
      expect(again.store.cold?.size).toBe(286);
      expect((await client.get(read)).job.status).toBe('queued');
      await client.cancel(cancelled);
      const { jobs } = await client.submitBatch([
        { queue, params: { late: 0 }, priority: 0 },
        { queue, params: { late: 1 }, priority: 5 },
        { queue, params: { late: 2 }, priority: 9 },
      ]);
      expect(jobs.every((j) => j.ok)).toBe(true);
      await caughtUp(again, jsm);
      expect(again.store.cold?.size).toBe(284);
      expect((await client.list({ queue, limit: 1000 })).jobs.map((j) => j.job_id)).toHaveLength(303);
      const progress = (await client.progress(queue))[0]!;
      expect(progress.counts).toMatchObject({ queued: 302, cancelled: 1 });

      const zeroAgain = await startTrackedNode(server, { clock, nodeName: 'cold-zero-again' });
      try {
        const expected = zeroAgain.queueOrder.snapshot(queue);
        expect(again.queueOrder.snapshot(queue)).toEqual(expected);
        expect(takeAll(again, queue)).toEqual(expected.ready);
        expect(takeAll(zeroAgain, queue)).toEqual(expected.ready);
        expect(expected.ready).toHaveLength(302 - 6);
      } finally {
        await zeroAgain.close();
      }
    } finally {
      await again.close();
    }
  });

  test('a whole rewrite copies the cold rows; restoring it holds the same state', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const dir = await tempDir();
    const first = await startTrackedNode(server, { clock, nodeName: 'rewrite-first', dataDir: dir });
    try {
      const { jobs } = await client.submitBatch(Array.from({ length: 50 }, (_, i) => ({ queue, params: { i }, priority: i % 4 })));
      expect(jobs.every((j) => j.ok)).toBe(true);
      await caughtUp(first, jsm);
      await first.checkpoint();
    } finally {
      await first.close();
    }
    // Restored cold, one job read (materialised), then written whole into a new directory by a
    // node whose file is new to it.
    const second = await startTrackedNode(server, { clock, nodeName: 'rewrite-second', dataDir: dir });
    const copyDir = await tempDir();
    let picked: string;
    try {
      // The other test's queued jobs are in the stream too.
      const coldAtStart = second.store.cold!.size;
      expect(coldAtStart).toBeGreaterThanOrEqual(50);
      picked = second.queueOrder.snapshot(queue).ready[7]!;
      expect(second.store.get(picked)?.state.job.value).toBe('queued');
      expect(second.store.cold?.size).toBe(coldAtStart - 1);
      const { CheckpointFile } = await import('../../src/store/checkpoints.js');
      const file = new CheckpointFile(join(copyDir, 'checkpoint.json'), (await jsm.streams.info('DOCKET')).created);
      expect(await file.write(second.tail.position, second.store, [...second.aggregates.values()])).toMatchObject({ full: true });
    } finally {
      await second.close();
    }
    const third = await startTrackedNode(server, { clock, nodeName: 'rewrite-third', dataDir: copyDir });
    const zero = await startTrackedNode(server, { clock, nodeName: 'rewrite-zero' });
    try {
      expect(third.store.cold?.size).toBeGreaterThanOrEqual(50);
      expect(captureProjections(third, [queue])).toEqual(captureProjections(zero, [queue]));
    } finally {
      await third.close();
      await zero.close();
    }
  });
});
