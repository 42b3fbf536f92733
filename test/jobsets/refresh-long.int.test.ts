/**
 * Long refreshes. A refresh whose key source takes longer to read than the queue's leadership lease (a large
 * query, a slow command) keeps its queue led meanwhile: an empty job set has no pending job and
 * nothing in its writer, and would otherwise be let go as idle mid-read, failing the refresh with
 * "this node no longer leads". The node here runs with a 600 ms lease and a source that answers
 * after 2 s. A refresh of more adds than one turn decides (2,000) adds each key once (on a node
 * of its own with the default lease).
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { closeTestFile, connectTestClients, startTrackedNode, uniqueQueue } from '../support/docket.js';
import type { NatsConnection } from '@nats-io/nats-core';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let bigServer: TestNatsServer;
let bigNode: DocketNode;
let bigClient: Client;
let bigNc: NatsConnection;

beforeAll(async () => {
  [server, bigServer] = await Promise.all([startNatsServer(), startNatsServer()]);
  node = await startTrackedNode(server, { nodeName: 'lease', leadershipLeaseMs: 600 });
  bigNode = await startTrackedNode(bigServer, { nodeName: 'many' });
  ({ client, nc } = await connectTestClients(server, 'refresh-lease-test'));
  ({ client: bigClient, nc: bigNc } = await connectTestClients(bigServer, 'refresh-many-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
  await closeTestFile({ client: bigClient, nc: bigNc, nodes: [bigNode], server: bigServer });
});

test('a refresh reading a source for longer than the lease adds its keys', async () => {
  const queue = uniqueQueue('slow-source');
  await client.putJobSet({ queue, key_source: { command: ['sh', '-c', 'sleep 2; echo \'{"a":1}\'; echo \'{"a":2}\''] } });
  const reply = await client.refresh({ queue });
  expect(reply).toMatchObject({ added: 2, removed: 0, replayed: false });
  expect((await client.showJobSet(queue)).progress).toMatchObject({ pending: 2 });
});

test('a refresh of 25,000 new keys, decided over several turns, adds each once; a second adds none', async () => {
  const queue = uniqueQueue('many-keys');
  await bigClient.putJobSet({ queue, key_source: { command: ['sh', '-c', 'seq 1 25000 | sed \'s/.*/{"a":&}/\''] } });
  expect(await bigClient.refresh({ queue })).toMatchObject({ added: 25_000, removed: 0 });
  expect(await bigClient.refresh({ queue })).toMatchObject({ added: 0, removed: 0 });
  expect((await bigClient.showJobSet(queue)).progress).toMatchObject({ pending: 25_000, total: 25_000 });
});
