/**
 * The raw read rate of a log of small commits (one short event each, as a worker's completions
 * at concurrency 1 make), through the same reader as replay and audit (measureRawRead): what
 * pulling few commits at a time (src/nats/pull-limit.ts) costs where commits are small.
 *
 *   npx tsx bench/read-small-commits.ts [commits=200000]
 */
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { startNatsServer } from '../test/support/nats-server.js';
import { ensureStream } from '../src/nats/streams.js';
import { measureRawRead } from '../src/store/read-log.js';

const n = Number(process.argv[2] ?? 200_000);
const server = await startNatsServer();
const nc = await connect({ servers: server.url });
await ensureStream(nc);
const js = jetstream(nc);
const payload = new TextEncoder().encode(JSON.stringify({ v: 2, events: [{ id: 'e'.repeat(22), type: 'job.succeeded', data: { run_id: 'r'.repeat(22) } }] }));
let inflight: Promise<unknown>[] = [];
for (let i = 0; i < n; i++) {
  inflight.push(js.publish('docket.log.q.small', payload));
  if (inflight.length >= 1_000) {
    await Promise.all(inflight);
    inflight = [];
  }
}
await Promise.all(inflight);
for (let run = 0; run < 3; run++) {
  const t0 = performance.now();
  await measureRawRead(nc, {});
  console.log(JSON.stringify({ commits: n, rate: Math.round(n / ((performance.now() - t0) / 1000)) }));
}
await nc.close();
await server.stop();
process.exit(0);
