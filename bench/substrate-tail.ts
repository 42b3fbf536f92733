/**
 * The substrates' own tails, beside BullMQ's whole job: how slow the slowest 1% of two round
 * trips in sequence through each server is, with no docket and no BullMQ code on the path. The
 * latency.p99 target (docket's submit → completion at or under BullMQ's) needs docket's two
 * appends in sequence (the claim's commit before the job is handed over, the completion's commit
 * before it is seen: the contract) to have a tail under BullMQ's whole job.
 *
 * Each pass runs, one after the other on fresh servers, `pairs` pairs in sequence of:
 *   - nats_core: two core request/reply round trips through nats-server (the responder on a
 *     connection of its own in this process): no JetStream, no disk;
 *   - nats_appends: two JetStream appends with docket's headers (bench/lib/latency-floor.ts, the
 *     embedded floor);
 *   - redis_aof: two round trips to Redis with AOF everysec (SET then GET of one key);
 *   - bullmq_job: BullMQ's whole job (add, then wait until finished), as in the latency row.
 * and prints p50, p99 and the share of pairs over 1.5 ms for each, per pass.
 *
 *   npx tsx bench/substrate-tail.ts [pairs=3000] [passes=3]
 */
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { startNatsServer } from '../test/support/nats-server.js';
import { floorAppender, floorCommits } from './lib/latency-floor.js';
import { freshStream } from './lib/jetstream.js';
import { latency as bullmqLatency } from './lib/bullmq.js';
import { percentile } from './lib/harness.js';
import { startRedis } from './lib/procs.js';

const WARMUP = 1_000;
/** What a docket commit of one job weighs, about (bench/lib/events.ts). */
const PAYLOAD = new Uint8Array(730);

interface Tail {
  readonly p50: number;
  readonly p99: number;
  readonly over_1_5ms: number;
  readonly max: number;
}

function tailOf(samples: readonly number[]): Tail {
  const warm = samples.slice(WARMUP);
  return {
    p50: percentile(warm, 50),
    p99: percentile(warm, 99),
    over_1_5ms: warm.filter((ms) => ms > 1.5).length / warm.length,
    max: Math.max(...warm),
  };
}

async function timed(pairs: number, pair: (i: number) => Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < pairs + WARMUP; i++) {
    const t0 = performance.now();
    await pair(i);
    samples.push(performance.now() - t0);
  }
  return samples;
}

async function natsCore(pairs: number): Promise<number[]> {
  const server = await startNatsServer();
  const [requester, responder] = [await connect({ servers: server.url }), await connect({ servers: server.url })];
  try {
    responder.subscribe('tail.echo', { callback: (_err, m) => void m.respond(m.data) });
    await responder.flush();
    return await timed(pairs, async () => {
      await requester.request('tail.echo', PAYLOAD);
      await requester.request('tail.echo', PAYLOAD);
    });
  } finally {
    await requester.close();
    await responder.close();
    await server.stop();
  }
}

async function natsAppends(pairs: number): Promise<number[]> {
  const server = await startNatsServer();
  const nc = await connect({ servers: server.url });
  try {
    await freshStream(nc, undefined, ['docket.log.>']);
    const commits = floorCommits(pairs + WARMUP);
    const append = floorAppender(nc);
    return await timed(pairs, async (i) => {
      await append(commits[i]![0]);
      await append(commits[i]![1]);
    });
  } finally {
    await nc.close();
    await server.stop();
  }
}

async function redisAof(pairs: number): Promise<number[]> {
  const redis = await startRedis('aof');
  const client = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
  try {
    await client.connect();
    const value = Buffer.from(PAYLOAD);
    return await timed(pairs, async (i) => {
      await client.set(`tail:${i}`, value);
      await client.get(`tail:${i}`);
    });
  } finally {
    client.disconnect();
    await redis.stop();
  }
}

async function bullmqJob(pairs: number): Promise<Tail> {
  const redis = await startRedis('aof');
  try {
    const m = await bullmqLatency(redis, pairs, WARMUP);
    const extra = m.extra as { max?: number };
    return { p50: m.values['p50']!, p99: m.values['p99']!, over_1_5ms: Number.NaN, max: extra.max ?? Number.NaN };
  } finally {
    await redis.stop();
  }
}

const pairs = Number(process.argv[2] ?? 3_000);
const passes = Number(process.argv[3] ?? 3);
const fmt = (t: Tail) => `p50 ${t.p50.toFixed(2)} ms, p99 ${t.p99.toFixed(2)} ms, max ${t.max.toFixed(1)} ms${Number.isNaN(t.over_1_5ms) ? '' : `, over 1.5 ms ${(t.over_1_5ms * 100).toFixed(2)}%`}`;
for (let pass = 1; pass <= passes; pass++) {
  console.log(`pass ${pass} (${pairs.toLocaleString('en-US')} in sequence, after ${WARMUP} not counted):`);
  console.log(`  nats_core     two core request/reply round trips: ${fmt(tailOf(await natsCore(pairs)))}`);
  console.log(`  nats_appends  two JetStream appends:               ${fmt(tailOf(await natsAppends(pairs)))}`);
  console.log(`  redis_aof     two Redis round trips (SET, GET):    ${fmt(tailOf(await redisAof(pairs)))}`);
  console.log(`  bullmq_job    BullMQ's whole job:                  ${fmt(await bullmqJob(pairs))}`);
}
process.exit(0);
