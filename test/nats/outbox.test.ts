/**
 * The node's outbox on a real connection: publishes gathered over a turn leave together at its
 * end, and a worker's reply (publishFirst) leaves a turn ahead of the rest, so the process that
 * hosts the worker reads its job before the client's reply and the commit's live message.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { Outbox } from '../../src/nats/outbox.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let nc: NatsConnection;
let watch: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  watch = await connect({ servers: server.url });
});

afterAll(async () => {
  await watch?.close();
  await nc?.close();
  await server?.stop();
});

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
/** Messages handed to the connection so far (not yet necessarily written). */
const handedOver = () => nc.stats().outMsgs;

/** Subscribes on another connection and resolves with the subjects, in arrival order, once `count` came. */
async function arrivals(subject: string, count: number): Promise<() => Promise<string[]>> {
  const seen: string[] = [];
  let done!: () => void;
  const all = new Promise<void>((resolve) => (done = resolve));
  watch.subscribe(subject, {
    callback: (_err, msg) => {
      seen.push(msg.subject);
      if (seen.length === count) done();
    },
  });
  await watch.flush();
  return async () => {
    await all;
    return seen;
  };
}

describe('Outbox', () => {
  test('publishes gathered in a turn are handed over together at its end, in order', async ({ task }) => {
    const outbox = new Outbox(nc, silentLogger);
    const arrived = await arrivals(`${task.id}.>`, 3);
    const before = handedOver();
    outbox.publish(`${task.id}.a`, new Uint8Array());
    outbox.publish(`${task.id}.b`, new Uint8Array());
    outbox.publish(`${task.id}.c`, new Uint8Array());
    expect(handedOver()).toBe(before);
    await turn();
    expect(handedOver()).toBe(before + 3);
    expect(await arrived()).toEqual([`${task.id}.a`, `${task.id}.b`, `${task.id}.c`]);
  });

  test("a worker's reply leaves a turn ahead of the turn's other publishes and tasks follow it", async ({ task }) => {
    const outbox = new Outbox(nc, silentLogger);
    const arrived = await arrivals(`${task.id}.>`, 3);
    const before = handedOver();
    const ran: number[] = [];
    outbox.publish(`${task.id}.live`, new Uint8Array());
    outbox.atEndOfTurn(() => ran.push(handedOver() - before));
    outbox.publishFirst(`${task.id}.worker`, new Uint8Array());
    outbox.publish(`${task.id}.client`, new Uint8Array());
    await turn();
    // The worker's reply alone: nats.js writes it at the end of this turn's microtasks.
    expect(handedOver()).toBe(before + 1);
    // A task (a partition writer's next commit) goes with the first write.
    expect(ran).toEqual([1]);
    await turn();
    expect(handedOver()).toBe(before + 3);
    expect(await arrived()).toEqual([`${task.id}.worker`, `${task.id}.live`, `${task.id}.client`]);
  });

  test('the rest is held back one turn only, however many turns in a row answer workers', async ({ task }) => {
    const outbox = new Outbox(nc, silentLogger);
    const arrived = await arrivals(`${task.id}.>`, 6);
    for (let turnNo = 1; turnNo <= 3; turnNo++) {
      outbox.publishFirst(`${task.id}.worker${turnNo}`, new Uint8Array());
      outbox.publish(`${task.id}.live${turnNo}`, new Uint8Array());
      await turn();
    }
    await turn();
    // Each turn's live message leaves with the next turn's worker reply, ahead of it.
    expect(await arrived()).toEqual([`${task.id}.worker1`, `${task.id}.live1`, `${task.id}.worker2`, `${task.id}.live2`, `${task.id}.worker3`, `${task.id}.live3`]);
  });

  test('with no worker reply in the turn, nothing is held back', async ({ task }) => {
    const outbox = new Outbox(nc, silentLogger);
    const before = handedOver();
    outbox.publishFirst(`${task.id}.worker`, new Uint8Array());
    await turn();
    expect(handedOver()).toBe(before + 1);
    outbox.publish(`${task.id}.live`, new Uint8Array());
    await turn();
    expect(handedOver()).toBe(before + 2);
  });
});
