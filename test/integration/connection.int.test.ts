/**
 * Issue 12 item 8: an outage of NATS reads as one. The node logs one line when its connection
 * drops (warn, with the server) and one when it is back (info, with the server and the outage's
 * length), however many reconnect attempts lie between.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { capturingLogger, startTrackedNode, uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let node: DocketNode | undefined;
const log = capturingLogger('info');

beforeAll(async () => {
  server = await startNatsServer();
});

afterAll(async () => {
  await node?.close();
  await server?.stop();
});

test('item 8: a NATS outage is one warn line when the connection drops and one info line with the server and the duration when it is back', async ({ task }) => {
  node = await startTrackedNode(server, { nodeName: 'outage-a', logger: log.logger });
  const lost = log.line('NATS connection lost; reconnecting');
  const restored = log.line('NATS connection restored');
  const down = Date.now();
  // SIGKILL and a new server on the same port and store: an outage of a few hundred ms.
  server = await server.restart();
  const [lostLine, restoredLine] = await Promise.all([lost, restored]);
  const up = Date.now();

  expect(lostLine).toMatchObject({ level: 40, component: 'nats', node: 'outage-a', server: expect.stringContaining(String(server.port)) });
  expect(restoredLine).toMatchObject({ level: 30, component: 'nats', server: expect.stringContaining(String(server.port)), outageMs: expect.any(Number) });
  expect(restoredLine['outageMs'] as number).toBeGreaterThanOrEqual(0);
  expect(restoredLine['outageMs'] as number).toBeLessThanOrEqual(up - down);
  // One of each, not one per reconnect attempt.
  expect(log.lines.filter((l) => l.msg === 'NATS connection lost; reconnecting')).toHaveLength(1);
  expect(log.lines.filter((l) => l.msg === 'NATS connection restored')).toHaveLength(1);

  // And it serves again.
  const client = await Client.connect({ servers: server.url });
  try {
    expect(await client.submit({ queue: uniqueQueue(task.name) })).toMatchObject({ created: true });
  } finally {
    await client.close();
  }
});
