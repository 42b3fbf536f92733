/**
 * JetStream appends one at a time (publish, wait for the ack), and core request-reply round trips
 * through the same nats-server: the substrate's own latency and its tail, beside which docket's
 * latency rows are read (README "Where docket misses").
 *
 *   npx tsx bench/append-latency.ts [n=3000]
 */
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer } from '../test/support/nats-server.js';
import { percentile } from './lib/harness.js';

const n = Number(process.argv[2] ?? 3000);
const WARMUP = 50;
/** About a commit of two job events. */
const payload = new Uint8Array(900).fill(65);

/** p50, p99 and max in ms of `n` sequential calls of `once`, after a warm-up. */
async function timed(once: () => Promise<unknown>): Promise<Record<string, string>> {
  const samples: number[] = [];
  for (let i = 0; i < n + WARMUP; i++) {
    const t0 = performance.now();
    await once();
    if (i >= WARMUP) samples.push(performance.now() - t0);
  }
  const ms = (p: number) => percentile(samples, p).toFixed(3);
  return { p50: ms(50), p99: ms(99), max: ms(100) };
}

const server = await startNatsServer();
const nc = await connect({ servers: server.url });
const other = await connect({ servers: server.url });
try {
  await (await jetstreamManager(nc)).streams.add({ name: 'APPEND_LATENCY', subjects: ['append.>'] });
  const js = jetstream(nc);
  const jsAppend = await timed(() => js.publish('append.one', payload));
  nc.subscribe('echo', { callback: (_err, msg) => void msg.respond(msg.data) });
  await nc.flush();
  const coreRoundTrip = await timed(() => other.request('echo', payload));
  console.log(JSON.stringify({ n, js_append_ms: jsAppend, core_request_ms: coreRoundTrip }));
} finally {
  await other.close();
  await nc.close();
  await server.stop();
}
