/**
 * The SDK's request/reply (src/nats/requester.ts) on a real nats-server: answers go to their own
 * request whatever their order, and every way a request can fail reads as nats.js's request()
 * reads it: TimeoutError, and RequestError with the no-responders or permission error as cause.
 */
import { connect, errors, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Requester } from '../../src/nats/requester.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let nc: NatsConnection;
let responder: NatsConnection;

// One user may publish anything but `forbidden.>`.
const USERS = 'authorization { users = [ { user: "all", password: "pw" }, { user: "limited", password: "pw", permissions: { publish: { deny: ["forbidden.>"] } } } ] }';

beforeAll(async () => {
  server = await startNatsServer({ config: USERS });
  nc = await connect({ servers: server.url, user: 'all', pass: 'pw' });
  responder = await connect({ servers: server.url, user: 'all', pass: 'pw' });
});

afterAll(async () => {
  await responder?.close();
  await nc?.close();
  await server?.stop();
});

const bytes = (text: string) => new TextEncoder().encode(text);

describe('Requester', () => {
  test('each reply reaches its own request, whatever order they are answered in', async ({ task }) => {
    const held: { reply: string; data: string }[] = [];
    responder.subscribe(`${task.id}.echo`, {
      callback: (_err, msg) => {
        held.push({ reply: msg.reply!, data: msg.string() });
        // Answers the three at once, last first.
        if (held.length === 3) for (const h of held.reverse()) responder.publish(h.reply, bytes(`re ${h.data}`));
      },
    });
    await responder.flush();
    const requests = new Requester(nc);
    const answers = await Promise.all(['a', 'b', 'c'].map((data) => requests.request(`${task.id}.echo`, bytes(data), 5_000)));
    expect(answers.map((m) => m.string())).toEqual(['re a', 're b', 're c']);
  });

  test('nothing subscribed: a RequestError with NoRespondersError as its cause, at once', async ({ task }) => {
    const err = await new Requester(nc).request(`${task.id}.nobody`, bytes('x'), 30_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(errors.RequestError);
    expect((err as Error).message).toMatch(/no responders/);
    expect((err as Error).cause).toBeInstanceOf(errors.NoRespondersError);
  });

  test('no answer in time: a TimeoutError, and an answer after it is dropped', async ({ task }) => {
    let late: string | undefined;
    responder.subscribe(`${task.id}.slow`, {
      callback: (_err, msg) => {
        late = msg.reply;
      },
    });
    await responder.flush();
    const requests = new Requester(nc);
    const err = await requests.request(`${task.id}.slow`, bytes('x'), 50).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(errors.TimeoutError);
    responder.publish(late!, bytes('too late'));
    await responder.flush();
    // The requester still answers the next request (the late reply found no request to settle).
    responder.subscribe(`${task.id}.fast`, {
      callback: (_err, msg) => {
        msg.respond(bytes('ok'));
      },
    });
    await responder.flush();
    expect((await requests.request(`${task.id}.fast`, bytes('y'), 5_000)).string()).toBe('ok');
  });

  test('a publish the server refuses fails its request at once with the permission error as cause', async () => {
    const limited = await connect({ servers: server.url, user: 'limited', pass: 'pw' });
    try {
      const err = await new Requester(limited).request('forbidden.cmd', bytes('x'), 30_000).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(errors.RequestError);
      expect((err as Error).cause).toBeInstanceOf(errors.PermissionViolationError);
    } finally {
      await limited.close();
    }
  });

  test('close() on a connection kept open fails the requests in flight; a later request listens again', async ({ task }) => {
    responder.subscribe(`${task.id}.never`, { callback: () => undefined });
    responder.subscribe(`${task.id}.fast`, {
      callback: (_err, msg) => {
        msg.respond(bytes('ok'));
      },
    });
    await responder.flush();
    const requests = new Requester(nc);
    const pending = requests.request(`${task.id}.never`, bytes('x'), 30_000).catch((e: unknown) => e);
    await nc.flush();
    requests.close();
    const err = await pending;
    expect(err).toBeInstanceOf(errors.RequestError);
    expect((err as Error).message).toMatch(/closed/);
    expect((await requests.request(`${task.id}.fast`, bytes('y'), 5_000)).string()).toBe('ok');
    requests.close();
  });

  test('the connection closing fails the requests in flight', async ({ task }) => {
    const own = await connect({ servers: server.url, user: 'all', pass: 'pw' });
    responder.subscribe(`${task.id}.never`, { callback: () => undefined });
    await responder.flush();
    const pending = new Requester(own).request(`${task.id}.never`, bytes('x'), 30_000).catch((e: unknown) => e);
    await own.flush();
    await own.close();
    const err = await pending;
    expect(err).toBeInstanceOf(errors.RequestError);
    expect((err as Error).message).toMatch(/connection closed/);
  });
});
