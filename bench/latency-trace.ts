/**
 * One job's path through the latency loop, hop by hop: the latency loop of
 * bench/latency-probe.ts (node, Worker at concurrency 1, client, in one process) with every
 * NATS message each connection sends or receives, and every socket write, timestamped. Prints,
 * for the most common sequence of hops per job, each hop's median time after the submit was
 * published, and how many messages, socket writes and commits a job took.
 *
 *   npx tsx bench/latency-trace.ts [jobs=300]
 *   TRACE_SLOWEST=20 npx tsx bench/latency-trace.ts 3000   # also the 20 slowest jobs' largest gaps
 *   EMBEDDED=1 npx tsx bench/latency-trace.ts 3000         # the client and the Worker given `local: node`
 */
import { createRequire } from 'node:module';
import { Client } from '../src/client/client.js';
import { Worker } from '../src/client/worker.js';
import { startNode } from '../src/node.js';
import { PartitionWriter } from '../src/store/partition-writer.js';
import { startNatsServer } from '../test/support/nats-server.js';

interface Hop {
  readonly t: number;
  readonly what: string;
}
const hops: Hop[] = [];
let tracing = false;
const record = (what: string) => {
  if (tracing) hops.push({ t: performance.now(), what });
};
/** A subject without its unique tail: inboxes and job ids vary per job. */
const shape = (subject: string) => (subject.startsWith('_INBOX') ? '_INBOX' : subject.startsWith('$JS.ACK') ? '$JS.ACK' : subject.split('.').slice(0, 4).join('.'));
// Every connection's protocol handler: publishes, received messages and socket writes.
const require = createRequire(import.meta.url);
const { ProtocolHandler } = require('@nats-io/nats-core/internal') as { ProtocolHandler: { prototype: Record<string, (...args: unknown[]) => unknown> } };
type Handler = { options: { name?: string }; subscriptions: { get(sid: number): { subject: string } | undefined }; outbound: { size(): number } };
const label = (h: Handler) => (h.options.name ?? 'anon').replace(/^docket-worker-.*/, 'worker').replace(/^docket-latency-trace/, 'node');
const { publish, processMsg, flushPending } = ProtocolHandler.prototype;
ProtocolHandler.prototype.publish = function (this: Handler, subject: unknown, ...rest: unknown[]) {
  record(`${label(this)} pub ${shape(subject as string)}`);
  return publish!.call(this, subject, ...rest);
};
ProtocolHandler.prototype.processMsg = function (this: Handler, msg: unknown, data: unknown) {
  const { subject } = msg as { subject: Uint8Array | string };
  record(`${label(this)} recv ${shape(typeof subject === 'string' ? subject : Buffer.from(subject).toString())}`);
  return processMsg!.call(this, msg, data);
};
ProtocolHandler.prototype.flushPending = function (this: Handler) {
  if (this.outbound.size() > 0) record(`${label(this)} write`);
  return flushPending!.call(this);
};

// The node's writer: when a decision joins the next commit, and when that commit starts out.
const writer = PartitionWriter.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
for (const method of ['append', 'appendEach', 'flush']) {
  const original = writer[method]!;
  writer[method] = function (this: unknown, ...args: unknown[]) {
    record(`node writer.${method}`);
    return original.apply(this, args);
  };
}

const n = Number(process.argv[2] ?? 300);
const warmup = 20;
const server = await startNatsServer();
const node = await startNode({ servers: server.url, nodeName: 'latency-trace' });
// EMBEDDED=1: the latency rows' embedded path (README "Embedded workers").
const place = process.env.EMBEDDED === '1' ? { local: node } : { servers: server.url };
const client = await Client.connect(place);
const watcher = await Client.connect(place);
const worker = new Worker({ ...place, queue: 'lat', concurrency: 1, handler: async () => record('worker handler') });
await worker.start();
const waiting = new Map<string, () => void>();
const early = new Set<string>();
const abort = new AbortController();
const events = watcher.live({ queue: 'lat', types: ['job.succeeded'], signal: abort.signal });
await events.ready;
void (async () => {
  for await (const e of events) {
    record('watcher sees job.succeeded');
    const resolve = waiting.get(e.aggregate.id);
    if (resolve) resolve();
    else early.add(e.aggregate.id);
  }
})().catch(() => undefined);

const perJob: Hop[][] = [];
for (let i = 0; i < n + warmup; i++) {
  tracing = i >= warmup;
  const start = hops.length;
  record('client submit');
  const { job_id } = await client.submit({ queue: 'lat', params: { i } });
  record('client submit answered');
  if (!early.delete(job_id)) {
    await new Promise<void>((resolve) => waiting.set(job_id, resolve));
    waiting.delete(job_id);
  }
  record('client done');
  if (tracing) perJob.push(hops.slice(start));
}
tracing = false;
if (process.env.TRACE_RAW) for (const job of perJob.slice(100, 103)) for (const h of job) console.log((h.t - job[0]!.t).toFixed(3), h.what);
// Hops of one job run from its submit to the next job's submit (the worker's new claim races it).
const jobs = perJob.map((job, i) => [...job, ...(perJob[i + 1] ?? []).filter((h) => h.t < (perJob[i + 1]![0]?.t ?? 0))]);
const signature = (job: Hop[]) => job.map((h) => h.what).join(' | ');
const bySignature = new Map<string, Hop[][]>();
for (const job of jobs) bySignature.set(signature(job), [...(bySignature.get(signature(job)) ?? []), job]);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ranked = [...bySignature.values()].sort((a, b) => b.length - a.length);
console.log(`${jobs.length} jobs; ${ranked.length} distinct hop sequences; the 3 most common:`);
for (const group of ranked.slice(0, 3)) {
  const first = group[0]!;
  const count = (re: RegExp) => first.filter((h) => re.test(h.what)).length;
  console.log(`\n${group.length} jobs: ${count(/ pub /)} publishes, ${count(/ write$/)} socket writes, ${count(/node-appends pub docket\.log|node pub docket\.log/)} commits; median ms after the submit:`);
  first.forEach((hop, i) => {
    console.log(`  ${median(group.map((job) => job[i]!.t - job[0]!.t)).toFixed(3).padStart(7)}  ${hop.what}`);
  });
}
// TRACE_SLOWEST=N: the N slowest jobs, each with its largest gap between two hops (what it waited on).
for (const job of [...perJob].sort((a, b) => b[b.length - 1]!.t - b[0]!.t - (a[a.length - 1]!.t - a[0]!.t)).slice(0, Number(process.env.TRACE_SLOWEST ?? 0))) {
  let gap = { ms: 0, after: '', before: '' };
  for (let i = 1; i < job.length; i++) if (job[i]!.t - job[i - 1]!.t > gap.ms) gap = { ms: job[i]!.t - job[i - 1]!.t, after: job[i - 1]!.what, before: job[i]!.what };
  console.log(`slow: ${(job[job.length - 1]!.t - job[0]!.t).toFixed(3)} ms; largest gap ${gap.ms.toFixed(3)} ms, ${gap.after} -> ${gap.before}`);
}
abort.abort();
await worker.close();
await client.close();
await watcher.close();
await node.close();
await server.stop();
process.exit(0);
