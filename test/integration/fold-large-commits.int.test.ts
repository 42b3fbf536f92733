/**
 * A node with no checkpoint folds the whole log at start, and a log written by bulk submits is
 * made of commits near the server's max payload. Its reads pull few enough commits that they
 * fit 32 MiB at the max payload (src/nats/pull-limit.ts): a pull of thousands asked for more than
 * nats-server holds for a client (64 MiB by default), which cut the connection as a slow
 * consumer while the node was folding, and the node never came to serve.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { readLogBatches } from '../../src/store/read-log.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { closeTestFile, connectTestClients, startTrackedNode, uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;
let client: Client;
let nc: NatsConnection;
const dirs: string[] = [];

beforeAll(async () => {
  server = await startNatsServer();
  ({ client, nc } = await connectTestClients(server, 'fold-large-commits-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, server });
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** Jobs of ~1 KiB each, so a batch of 1,000 (a request under the max payload) fills commits near it. */
const PAD = 'x'.repeat(800);
const BATCHES = 130;
const PER_BATCH = 1_000;

test('a node with no checkpoint folds a log of ~120 MB of full commits and serves; a log read pulls it whole', { timeout: 90_000 }, async ({ task }) => {
  const queue = uniqueQueue(task.name);
  const writerDir = await mkdtemp(join(tmpdir(), 'docket-fold-large-'));
  dirs.push(writerDir);
  const writer = await startTrackedNode(server, { nodeName: 'fold-large-writer', dataDir: writerDir });
  try {
    for (let b = 0; b < BATCHES; b++) {
      const { jobs } = await client.submitBatch(Array.from({ length: PER_BATCH }, (_, i) => ({ queue, params: { i: b * PER_BATCH + i, pad: PAD } })));
      expect(jobs.every((j) => j.ok)).toBe(true);
    }
  } finally {
    await writer.close();
  }

  // The log is well past what nats-server buffers for one client.
  let bytes = 0;
  let commits = 0;
  for await (const batch of readLogBatches(nc)) {
    for (const m of batch) {
      bytes += m.data.length;
      commits += 1;
    }
  }
  expect(bytes).toBeGreaterThan(100 * 2 ** 20);

  // A node with an empty data directory: no checkpoint, the whole log folded before serving.
  const freshDir = await mkdtemp(join(tmpdir(), 'docket-fold-large-'));
  dirs.push(freshDir);
  const fresh = await startTrackedNode(server, { nodeName: 'fold-large-fresh', dataDir: freshDir });
  try {
    expect(fresh.tail.position).toBeGreaterThanOrEqual(commits);
    const [progress] = await client.progress(queue);
    expect(progress?.counts.queued).toBe(BATCHES * PER_BATCH);
  } finally {
    await fresh.close();
  }
});
