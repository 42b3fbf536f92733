/**
 * Helpers for integration tests that drive docket through NATS: a node + client on a test
 * nats-server, disposable; a unique queue per test; the stream's message count for "nothing was
 * appended" checks; raw requests with arbitrary bytes; the log of one queue read back; and a
 * capture of a node's projections for replay comparisons.
 *
 * Isolation is by name (STYLE 2.12): subjects are fixed, so each test takes its own queue.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { Client } from '../../src/client/client.js';
import type { CommandHandler } from '../../src/commands/command-service.js';
import type { ErrorBody } from '../../src/errors.js';
import { canonicalJson } from '../../src/ids.js';
import { commitSeqOf, type Envelope } from '../../machines/index.js';
import { decodeCommit } from '../../src/nats/codec.js';
import { PartitionWriter, readPartitionTip } from '../../src/store/partition-writer.js';
import { queuePartition, subjects, STREAM } from '../../src/nats/subjects.js';
import { startNode, type DocketNode, type DocketOptions } from '../../src/node.js';
import type { QueueProgress } from '../../src/projections/progress.js';
import type { Logger } from '../../src/logger.js';
import { readLog } from '../../src/store/read-log.js';
import { startNatsServer, type TestNatsServer } from './nats-server.js';

/** A queue name of its own for one test: a slug of `name` and a short random suffix. */
export function uniqueQueue(name: string): string {
  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return `${slug || 'q'}-${randomBytes(4).toString('hex')}`;
}

// ---------------------------------------------------------------------------------------------
// Leak check (graphile's pattern): every node and client opened through these helpers is
// tracked until closed, so a test that forgets one fails in afterEach.

const open = new Set<string>();
let serial = 0;

/** Names of the nodes and clients opened here and not closed yet. */
export function openResources(): string[] {
  return [...open];
}

export interface DocketSetup {
  readonly server: TestNatsServer;
  readonly node: DocketNode;
  readonly client: Client;
  /** A raw connection of the test's own, for raw requests and the stream. */
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Starts a node on `server` (options as startNode's) and tracks it until closed.
 *
 * `awaitServing` (default true) flushes the node's connection before returning: startNode
 * resolves before its command subscription has reached the server, so a request sent at once
 * from another connection can get "no responders" (see the test "a node answers commands as
 * soon as startNode resolves"). Pass false to see startNode's own behaviour.
 */
export async function startTrackedNode(
  server: TestNatsServer,
  options: Omit<DocketOptions, 'servers'> = {},
  { awaitServing = true }: { awaitServing?: boolean } = {},
): Promise<DocketNode> {
  const name = options.nodeName ?? `node-${++serial}`;
  const node = await startNode({ servers: server.url, nodeName: name, ...options });
  if (awaitServing) await node.nc.flush();
  const tag = `node ${name} #${++serial}`;
  open.add(tag);
  // DocketNode is a plain object of closures: a copy with a tracking close() behaves the same.
  return {
    ...node,
    async close() {
      try {
        await node.close();
      } finally {
        open.delete(tag);
      }
    },
  };
}

/** A server-backed docket: one node, one client, one raw connection. Close it (or dispose it). */
export async function startDocket(server: TestNatsServer, options: Omit<DocketOptions, 'servers'> = {}): Promise<DocketSetup> {
  const node = await startTrackedNode(server, options);
  const client = await Client.connect({ servers: server.url });
  const nc = await connect({ servers: server.url, name: 'docket-test' });
  const jsm = await jetstreamManager(nc);
  const tag = `client #${++serial}`;
  open.add(tag);
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      await client.close();
      await nc.drain();
      await node.close();
    } finally {
      open.delete(tag);
    }
  };
  return { server, node, client, nc, jsm, close, [Symbol.asyncDispose]: close };
}

/** The number of messages in DOCKET (for "nothing was appended" checks). */
export async function streamMessages(jsm: JetStreamManager): Promise<number> {
  return (await jsm.streams.info(STREAM)).state.messages;
}

/** The stream's last sequence. */
export async function lastSeq(jsm: JetStreamManager): Promise<number> {
  return (await jsm.streams.info(STREAM)).state.last_seq;
}

export type RawReply = ({ ok: true } & Record<string, unknown>) | { ok: false; error: ErrorBody };

/** Sends `body` as is (bytes or a string) to `docket.cmd.<verb>` and returns the parsed reply. */
export async function rawRequest(nc: NatsConnection, verb: string, body: string | Uint8Array, timeoutMs = 30_000): Promise<RawReply> {
  const msg = await nc.request(subjects.command(verb), body, { timeout: timeoutMs });
  return msg.json<RawReply>();
}

/** As rawRequest with a JSON body. */
export function request(nc: NatsConnection, verb: string, body: unknown, timeoutMs?: number): Promise<RawReply> {
  return rawRequest(nc, verb, JSON.stringify(body), timeoutMs);
}

export interface StoredEvent {
  /** Stream sequence of the commit holding the event. */
  readonly seq: number;
  /** The event's index in its commit. */
  readonly index: number;
  /** Its aggregate's own subject (`docket.evt.job.<queue>.<id>`, live with `liveEvents: 'each'`). */
  readonly subject: string;
  readonly jobId: string;
  /** The commit's Nats-Msg-Id (its commit id). */
  readonly msgId: string | null;
  /** When the server stored it (ms since the epoch). */
  readonly time: number;
  readonly type: string;
  readonly id: string;
  readonly data: Record<string, unknown>;
}

/** Every event of `queue` (its partition's commits, unpacked) on the stream, in order. */
export async function queueLog(nc: NatsConnection, queue: string): Promise<StoredEvent[]> {
  const out: StoredEvent[] = [];
  for await (const m of readLog(nc, { filter: subjects.partition(queuePartition(queue)) })) {
    decodeCommit(m.data).events.forEach((env, index) => {
      const jobId = env.aggregate.id;
      out.push({ seq: m.seq, index, subject: subjects.job(queue, jobId), jobId, msgId: m.msgId, time: m.time, type: env.type, id: env.id, data: env.data as Record<string, unknown> });
    });
  }
  return out;
}

let deposedCommits = 0;

/**
 * Commits `events` to the queue's partition as a leader that is gone would have (a crash window
 * between two commits, a deposed leader's last send): no leader decides them and no reactor
 * acts on them. Written at the partition's tip under its last writer's epoch; returns the
 * commit's stream sequence.
 */
export async function commitAsDeposed(node: DocketNode, jsm: JetStreamManager, queue: string, events: readonly Envelope[]): Promise<number> {
  const partition = queuePartition(queue);
  const tip = await readPartitionTip(jsm, partition);
  const last = tip.seq === 0 ? null : await jsm.streams.getMessage(STREAM, { seq: tip.seq });
  const epoch = last ? decodeCommit(last.data).writer.epoch : 0;
  const writer = new PartitionWriter(node.nc, node.events, {
    partition, node: `deposed${++deposedCommits}`, epoch, tip, onCommitted: () => undefined, refoldTo: () => Promise.resolve(), log: node.log,
  });
  try {
    const [position] = await writer.append(events);
    return commitSeqOf(position!);
  } finally {
    writer.close(new Error('done'));
  }
}

/** How many events of `type` `queue` has on the stream. */
export async function countEvents(nc: NatsConnection, queue: string, type: string): Promise<number> {
  return (await queueLog(nc, queue)).filter((e) => e.type === type).length;
}

/**
 * The node's handler of `verb`, as registered, to call it on one node in particular: commands
 * are served in a queue group, so a request through NATS reaches a node of NATS's choosing and
 * a race between two given nodes cannot be staged from outside. Reads CommandService's private
 * map (there is no public way to address one node).
 */
export function handlerOf(node: DocketNode, verb: string): (body: unknown) => Promise<Record<string, unknown>> {
  const handlers = (node.commands as unknown as { handlers?: Map<string, CommandHandler> }).handlers;
  const handler = handlers?.get(verb);
  if (!handler) throw new Error(`node ${node.name} has no handler for ${verb} (CommandService internals changed?)`);
  return async (body) => handler(body);
}

/** Calls the node's handler and turns a thrown DocketError into the reply the wire would carry. */
export async function callNode(node: DocketNode, verb: string, body: unknown): Promise<RawReply> {
  try {
    return { ok: true, ...(await handlerOf(node, verb)(body)) } as RawReply;
  } catch (err) {
    const e = err as { code?: string; message?: string; toBody?: () => ErrorBody };
    if (typeof e.toBody === 'function') return { ok: false, error: e.toBody() };
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Projections, captured for "replay equals live".

export interface JobRecordView {
  readonly jobId: string;
  readonly queue: string;
  readonly seq: number;
  readonly submitSeq: number;
  readonly state: unknown;
  readonly submitId: string | null;
  readonly commandHash: string | null;
  readonly later: unknown;
}

export interface Projections {
  readonly queueOrder: Record<string, ReturnType<DocketNode['queueOrder']['snapshot']>>;
  /** `list`'s index: every job of the queue in submit order. */
  readonly queueIndex: Record<string, { seq: number; jobId: string }[]>;
  readonly progress: QueueProgress[];
  readonly jobs: Record<string, JobRecordView>;
  /** For each (queue, key) asked for: its live job and its generation count. */
  readonly keys: Record<string, { live: string | null; generations: number }>;
  readonly queues: string[];
}

export interface KeyRef {
  readonly queue: string;
  readonly key: unknown;
}

/**
 * A deep, plain copy of what a node holds: queue order per queue, progress, and every job
 * record (state, sequence, history). `queues` limits it to some queues (others are left out).
 */
export function captureProjections(node: DocketNode, queues?: readonly string[], keyRefs: readonly KeyRef[] = []): Projections {
  const wanted = queues === undefined ? undefined : new Set(queues);
  const keep = (q: string) => wanted === undefined || wanted.has(q);
  const allQueues = [...new Set([...node.queueOrder.queues(), ...node.queueIndex.queues()])].filter(keep).sort();
  const queueOrder: Projections['queueOrder'] = {};
  const queueIndex: Projections['queueIndex'] = {};
  for (const q of allQueues) {
    queueOrder[q] = node.queueOrder.snapshot(q);
    queueIndex[q] = [...node.queueIndex.after(q, 0)];
  }
  const keys: Projections['keys'] = {};
  for (const { queue, key } of keyRefs) {
    const canonical = canonicalJson(key);
    keys[`${queue} ${canonical}`] = { live: node.keys.liveJob(queue, canonical) ?? null, generations: node.keys.generations(queue, canonical) };
  }
  const jobs: Record<string, JobRecordView> = {};
  const ids = [...node.store.values()].filter((r) => keep(r.queue)).map((r) => r.jobId).sort();
  for (const id of ids) {
    const r = node.store.get(id)!;
    jobs[id] = { jobId: r.jobId, queue: r.queue, seq: r.seq, submitSeq: r.submitSeq, state: r.state, submitId: r.submitId, commandHash: r.commandHash, later: r.later };
  }
  return structuredClone({
    queueOrder,
    queueIndex,
    keys,
    progress: node.progress.all().filter((p) => keep(p.queue)),
    jobs,
    queues: allQueues,
  });
}

/** Waits until the node's tail has folded everything the stream holds now. */
export async function caughtUp(node: DocketNode, jsm: JetStreamManager): Promise<void> {
  await node.tail.waitFor(await lastSeq(jsm));
}

/**
 * Resolves once DOCKET has a consumer filtered on `filter` (e.g. the one `Client.events()`
 * creates on its first `next()`). `events()` gives no signal of its own that it is listening.
 */
export async function consumerListening(jsm: JetStreamManager, filter: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for await (const ci of jsm.consumers.list(STREAM)) {
      if (ci.config.filter_subject === filter) return;
    }
    if (Date.now() > deadline) throw new Error(`no consumer on ${filter} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Takes `n` items from an async iterator (then leaves it open for the caller to end). */
export async function take<T>(it: AsyncIterator<T>, n: number): Promise<T[]> {
  const out: T[] = [];
  while (out.length < n) {
    const next = await it.next();
    if (next.done) break;
    out.push(next.value);
  }
  return out;
}

/** What a test file talks to docket with: the SDK client, a plain connection and its JetStream manager. */
export interface TestClients {
  readonly client: Client;
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
}

export async function connectTestClients(server: TestNatsServer, name: string): Promise<TestClients> {
  const client = await Client.connect({ servers: server.url });
  const nc = await connect({ servers: server.url, name });
  return { client, nc, jsm: await jetstreamManager(nc) };
}

/** A test file's own server with two nodes on it (`<name>-a`, `<name>-b`, same options) and its clients. */
export interface TwoNodes extends TestClients {
  readonly server: TestNatsServer;
  readonly a: DocketNode;
  readonly b: DocketNode;
}

export async function startTwoNodes(name: string, options: Omit<DocketOptions, 'servers' | 'nodeName'> = {}): Promise<TwoNodes> {
  const server = await startNatsServer();
  const a = await startTrackedNode(server, { ...options, nodeName: `${name}-a` });
  const b = await startTrackedNode(server, { ...options, nodeName: `${name}-b` });
  return { server, a, b, ...(await connectTestClients(server, `${name}-test`)) };
}

/**
 * A test file's teardown, in order: its connections, then its nodes, then the server. Any part
 * may be missing (a beforeAll that failed half way).
 */
export async function closeTestFile(parts: {
  readonly client?: Client | undefined;
  readonly nc?: NatsConnection | undefined;
  readonly nodes?: readonly (DocketNode | undefined)[];
  readonly server?: TestNatsServer | undefined;
}): Promise<void> {
  await parts.client?.close();
  await parts.nc?.drain();
  for (const node of parts.nodes ?? []) await node?.close();
  await parts.server?.stop();
}

/** A logger, and a promise that resolves once it has logged a line matching `pattern` (at `level` or above). */
export function loggerWatchingFor(pattern: RegExp, level: 'debug' | 'info' | 'warn' = 'debug'): { logger: Logger; logged: Promise<void> } {
  let seen!: () => void;
  const logged = new Promise<void>((resolve) => (seen = resolve));
  const lines = new Writable({
    write(chunk: Buffer, _encoding, done) {
      if (pattern.test(chunk.toString())) seen();
      done();
    },
  });
  return { logger: pino({ level }, lines), logged };
}

/** A parsed pino line: level (10 trace … 60 fatal), msg and the bound fields. */
export type LogLine = { readonly level: number; readonly msg: string } & Record<string, unknown>;

export interface CapturedLog {
  readonly logger: Logger;
  /** Every line so far, in order. */
  readonly lines: LogLine[];
  /** Resolves with the first line (already written or to come) whose msg is `msg`. */
  line(msg: string): Promise<LogLine>;
}

/** A logger at `level` that keeps every line it writes, parsed, for assertions on level and fields. */
export function capturingLogger(level: 'debug' | 'info' = 'debug'): CapturedLog {
  const lines: LogLine[] = [];
  const waiting: { msg: string; resolve: (line: LogLine) => void }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n')) {
        if (text.trim() === '') continue;
        const line = JSON.parse(text) as LogLine;
        lines.push(line);
        for (const w of waiting.filter((w) => w.msg === line.msg)) {
          waiting.splice(waiting.indexOf(w), 1);
          w.resolve(line);
        }
      }
      done();
    },
  });
  return {
    logger: pino({ level }, sink),
    lines,
    line: (msg) => {
      const seen = lines.find((l) => l.msg === msg);
      return seen ? Promise.resolve(seen) : new Promise((resolve) => waiting.push({ msg, resolve }));
    },
  };
}

/** The reply's fields, or an error naming its refusal (a request a test expects to be taken). */
export function okReply(reply: RawReply): Record<string, unknown> {
  if (!reply.ok) throw new Error(`expected ok, got ${JSON.stringify(reply.error)}`);
  return reply;
}

/**
 * Resolves once `check` holds on the node's folded state, re-checked on every change of its jobs
 * or of its other aggregates (schedules, templates, queues), or fails after `ms`.
 */
export function untilFolded(node: DocketNode, check: () => boolean, what: string, ms = 10_000): Promise<void> {
  if (check()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      reject(new Error(`timed out waiting for ${what}`));
    }, ms);
    const look = () => {
      if (done || !check()) return;
      done = true;
      clearTimeout(timer);
      resolve();
    };
    node.store.onChange(look);
    node.aggregates.onChange(look);
  });
}
