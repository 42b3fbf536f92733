/**
 * `npx tsx bench/submit-latency.ts [submits]`: one submit at a time against a node in this
 * process, with the time of its commit's append (publish -> ack) taken apart, to set beside the
 * floors of `bench/floors.ts` (a core request/reply, a JetStream append). What is left is the
 * node's and the client's own work on the way.
 */
import { Client } from '../src/client/client.js';
import { startNode } from '../src/node.js';
import { EventStore } from '../src/store/event-store.js';
import { startNatsServer } from '../test/support/nats-server.js';

const n = Number(process.argv[2] ?? 2_000);
const warmup = 100;
const appends: number[] = [];
const append = EventStore.prototype.append;
EventStore.prototype.append = function (this: EventStore, request) {
  const t0 = performance.now();
  return append.call(this, request).then((appended) => {
    appends.push(performance.now() - t0);
    return appended;
  });
};

const server = await startNatsServer();
const node = await startNode({ servers: server.url });
const client = await Client.connect({ servers: server.url });
const submits: number[] = [];
for (let i = 0; i < n + warmup; i++) {
  const t0 = performance.now();
  await client.submit({ queue: 'latency', params: { i } });
  if (i >= warmup) submits.push(performance.now() - t0);
}
const p50 = (values: number[]): string => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)]!.toFixed(3);
process.stdout.write(`submit -> reply p50 ${p50(submits)} ms; its commit's append (publish -> ack) p50 ${p50(appends.slice(warmup))} ms; tail solo: ${!node.tail.following}\n`);
await client.close();
await node.close();
await server.stop();
