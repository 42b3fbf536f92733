/**
 * The latency loop's anatomy, in one process (a node, a Worker at concurrency 1, a client):
 * submit -> completion seen on the live events, one job after another. Prints p50/p99 of the
 * whole and of the submit's round trip, and how many jobs were claimed in their submit's own
 * commit (a claim parked before the submit: the dispatcher's hand-off).
 *
 *   [WARMUP=20] npx tsx bench/latency-probe.ts [jobs=300] [--node-process]
 *
 * --node-process: the node runs in its own process (`docket up`), as in `npm run bench`.
 * Also prints the latency histogram by whole milliseconds: whether the tail is a second mode (a
 * timer, a missed hand-over) or a spread (processes taking turns on the cores).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startDocketNode } from './lib/docket.js';
import { LatencyLoop, percentileMs } from './lib/latency-loop.js';
import { connect } from '@nats-io/transport-node';
import { startNode } from '../src/node.js';
import { queueLog } from '../test/support/docket.js';
import { startNatsServer } from '../test/support/nats-server.js';

const n = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 300);
const warmup = Number(process.env['WARMUP'] ?? 20);
const server = await startNatsServer();
const dataDir = mkdtempSync(join(tmpdir(), 'latency-probe-'));
const node = process.argv.includes('--node-process') ? await startDocketNode(server.url, dataDir, 'cli') : await startNode({ servers: server.url, nodeName: 'latency-probe' });
const loop = await LatencyLoop.start(server.url);
await loop.run(warmup);
const { total, submit: submits } = await loop.run(n);
const nc = await connect({ servers: server.url });
const seqs = new Map<string, { submitted?: number; claimed?: number }>();
for (const e of await queueLog(nc, 'lat')) {
  const entry = seqs.get(e.jobId) ?? {};
  if (e.type === 'job.submitted') entry.submitted = e.seq;
  if (e.type === 'job.claimed') entry.claimed = e.seq;
  seqs.set(e.jobId, entry);
}
const handedOff = [...seqs.values()].filter((s) => s.submitted !== undefined && s.submitted === s.claimed).length;
console.log(JSON.stringify({ jobs: n, p50_ms: percentileMs(total, 50), p99_ms: percentileMs(total, 99), max_ms: percentileMs(total, 100), submit_p50_ms: percentileMs(submits, 50), claimed_in_submit_commit: `${handedOff}/${seqs.size}` }));
const histogram: Record<number, number> = {};
for (const ms of total) histogram[Math.floor(ms)] = (histogram[Math.floor(ms)] ?? 0) + 1;
console.log(JSON.stringify({ histogram_ms: histogram }));
await loop.close();
await nc.close();
await node.close();
await server.stop();
rmSync(dataDir, { recursive: true, force: true });
process.exit(0);
