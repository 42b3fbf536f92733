/**
 * The round trips every submit -> completed crosses, measured alone on a fresh nats-server: a
 * core NATS request/reply (nats.js on both ends) and a JetStream append acknowledged (a publish
 * with Nats-Msg-Id and an expected last subject sequence, the headers docket's appends carry),
 * one after another. docket's path crosses two appends (the submit with the claim of the worker's
 * parked claim, then the completion) and four one-way hops (client -> node,
 * node -> worker, worker -> node, node -> the client's live subscription), so their sum is the
 * floor of its latency row.
 *
 *   npx tsx bench/floors.ts [samples=2000]
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { startNatsServer } from '../test/support/nats-server.js';

const samples = Number(process.argv[2] ?? 2_000);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor(((xs.length - 1) * p) / 100)]!;
const server = await startNatsServer();
const requester = await connect({ servers: server.url });
const responder = await connect({ servers: server.url });
try {
  responder.subscribe('floors.echo', { callback: (_err, msg) => void msg.respond(msg.data) });
  await responder.flush();
  const rtt: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    await requester.request('floors.echo', '{"i":1}');
    rtt.push(performance.now() - t0);
  }
  const jsm = await jetstreamManager(requester);
  await jsm.streams.add({ name: 'FLOORS', subjects: ['floors.evt.>'] });
  const ack: number[] = [];
  for (let i = 0; i < samples; i++) {
    const h = headers();
    h.set('Nats-Msg-Id', `m${i}`);
    h.set('Nats-Expected-Last-Subject-Sequence', '0');
    const t0 = performance.now();
    await requester.request(`floors.evt.${i}`, '{"v":1,"type":"job.submitted"}', { headers: h, timeout: 5_000 });
    ack.push(performance.now() - t0);
  }
  const row = (name: string, xs: number[]) => `${name}: p50 ${pct(xs, 50).toFixed(3)} ms, p99 ${pct(xs, 99).toFixed(3)} ms`;
  process.stdout.write(`${row('core request/reply round trip', rtt)}\n${row('JetStream append, publish -> ack', ack)}\n`);
  const floor = 2 * pct(ack, 50) + 2 * pct(rtt, 50);
  process.stdout.write(`floor of submit -> completed (2 appends + 4 one-way hops), p50 terms: ${floor.toFixed(3)} ms\n`);
} finally {
  await requester.close();
  await responder.close();
  await server.stop();
}
