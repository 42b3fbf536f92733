/**
 * A closed node lets go of everything: nothing it started (an interval, a subscription, a
 * listener) keeps it reachable, so a process that starts and stops nodes (an application's
 * tests, an embedding host) does not grow by a node's whole state each time. The fan-out lease
 * check was such an interval: every closed node stayed in memory with its jobs.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { startNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;

beforeAll(async () => {
  server = await startNatsServer();
});

afterAll(async () => {
  await server.stop();
});

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Starts a node, runs a few jobs through an embedded worker and client, closes them all, and watches the store for collection. */
async function useAndCloseNode(queue: string, collected: FinalizationRegistry<string>): Promise<void> {
  const node = await startNode({ servers: server.url, nodeName: `close-${queue}` });
  const client = await Client.connect({ local: node });
  let handled = 0;
  let allHandled!: () => void;
  const done = new Promise<void>((resolve) => (allHandled = resolve));
  const worker = new Worker({ local: node, queue, concurrency: 5, handler: () => (++handled === 20 ? allHandled() : undefined, null) });
  await worker.start();
  await client.submitBatch(Array.from({ length: 20 }, (_, i) => ({ queue, params: { i } })));
  await done;
  await worker.close();
  await client.close();
  await node.close();
  collected.register(node.store, 'store');
}

test('a closed node, with its store, is garbage collected', async ({ task }) => {
  let freed = false;
  const collected = new FinalizationRegistry<string>(() => void (freed = true));
  await useAndCloseNode(uniqueQueue(task.name), collected);
  // Finalizers run after a collection, on a later turn: collect and yield until one has run.
  for (let attempt = 0; attempt < 50 && !freed; attempt++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  expect(freed).toBe(true);
});
