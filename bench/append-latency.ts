/**
 * JetStream appends one at a time (publish, wait for the ack), and core request-reply round trips
 * through the same nats-server: the substrate's own latency and its tail, beside which docket's
 * latency rows are read (README "Where docket misses"). Beside them, the peer's: a Redis round
 * trip (SET, AOF everysec) and BullMQ's whole job (add, then wait until finished), so that one
 * run says how much of BullMQ's tail its substrate leaves to docket's two appends in sequence.
 *
 *   npx tsx bench/append-latency.ts [n=3000]
 *   WARMUP=1000 npx tsx bench/append-latency.ts 3000   # a warm process (default 50 not counted)
 */
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Redis } from 'ioredis';
import { startNatsServer } from '../test/support/nats-server.js';
import { latency as bullmqLatency } from './lib/bullmq.js';
import { percentile } from './lib/harness.js';
import { startRedis } from './lib/procs.js';

const n = Number(process.argv[2] ?? 3000);
const WARMUP = Number(process.env['WARMUP'] ?? 50);
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
const redis = await startRedis('aof');
const client = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
try {
  await (await jetstreamManager(nc)).streams.add({ name: 'APPEND_LATENCY', subjects: ['append.>'] });
  const js = jetstream(nc);
  const jsAppend = await timed(() => js.publish('append.one', payload));
  nc.subscribe('echo', { callback: (_err, msg) => void msg.respond(msg.data) });
  await nc.flush();
  const coreRoundTrip = await timed(() => other.request('echo', payload));
  await client.connect();
  const value = Buffer.from(payload);
  const redisSet = await timed(() => client.set('append-latency', value));
  const job = await bullmqLatency(redis, n, WARMUP);
  const bullmqJob = { p50: job.values['p50']!.toFixed(3), p99: job.values['p99']!.toFixed(3) };
  console.log(JSON.stringify({ n, warmup: WARMUP, js_append_ms: jsAppend, core_request_ms: coreRoundTrip, redis_set_ms: redisSet, bullmq_job_ms: bullmqJob }));
} finally {
  client.disconnect();
  await redis.stop();
  await other.close();
  await nc.close();
  await server.stop();
}
// BullMQ's closed connections can leave a handle behind.
process.exit(0);
