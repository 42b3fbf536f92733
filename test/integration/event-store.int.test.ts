/**
 * The event store's own edges, on a real nats-server: what happens to an append while no stream
 * answers (a stream not created yet, a leader election), and when the store closes meanwhile.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { EventStore } from '../../src/store/event-store.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
});

afterAll(async () => {
  await nc.close();
  await server.stop();
});

const payload = Buffer.from('{"v":2}');

test('appends waiting to be sent again when the store closes, or asked for after, are answered unavailable', async () => {
  // No DOCKET on this server: every publish gets "no responders", and the append backs off.
  const store = new EventStore(nc, { maxAttempts: 100 });
  const appended = store.append({ subject: 'docket.log.q.q', payload, msgId: 'c1', expectedSeq: 0 });
  const waiting = (): number => (store as unknown as { backingOff: Map<unknown, unknown> }).backingOff.size;
  await vi.waitFor(() => expect(waiting()).toBe(1));
  await store.close();
  await expect(appended).rejects.toMatchObject({ code: 'unavailable', message: 'event store closed' });
  expect(waiting()).toBe(0);
  // And one asked for after the close is answered at once, not left waiting for an ack.
  await expect(store.append({ subject: 'docket.log.q.q', payload, msgId: 'c2', expectedSeq: 0 })).rejects.toMatchObject({ code: 'unavailable', message: 'event store closed' });
});
