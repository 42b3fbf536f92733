/**
 * The log commands: `replay --job`, `replay --queue --at [--diff]`, `audit`, `explain`, `export`.
 * They read DOCKET's commits directly (src/store/read-log.ts) and unpack their events
 * (src/audit/decode.ts); they need no docket node, only NATS. A place in the log is a position:
 * a commit's stream sequence and an event's index in it, printed `seq:index`. Tables
 * for people, one JSON document with `--json` (JSON lines for `export`), and a progress bar with
 * rate and ETA on stderr when stderr is a terminal.
 *
 * Exit codes: 0 done; 1 when `audit` finds any violation, and for errors (as every command).
 */
import { positionalJobLoader } from './positional-loader.js';
import type { NatsConnection } from '@nats-io/nats-core';
import { availableParallelism } from 'node:os';
import type { Command } from 'commander';
import { POSITION_SPAN, positionOf, type Position } from '../../machines/index.js';
import {
  decodeStoredCommit,
  diffQueueViews,
  Explainer,
  WaitCollector,
  submittedWaiting,
  QueueReplay,
  replayJob,
  toExportLines,
  type AuditReport,
  type EventRef,
  type JobLoader,
  type Explanation,
  type JobReplay,
  type JobTimeline,
  type QueueDiff,
  type QueueView,
  type RecordedMessage,
} from '../audit/index.js';
import { InvalidRequestError, NotFoundError, UnavailableError } from '../errors.js';
import { jobNodeId, retryJobId } from '../ids.js';
import { connectNats, DEFAULT_NATS_URL } from '../nats/connection.js';
import { isIdToken, isQueueName, subjects, SYS_PARTITION } from '../nats/subjects.js';
import { printScheduleReplay } from './schedule-replay-output.js';
import { ScheduleReplayer } from '../audit/schedule-replay.js';
import { PackWriter } from '../audit/packed.js';
import { autoThread, AUTO_THREAD_MIN_BYTES, startPackedAudit, type PackedAudit } from '../audit/threaded.js';
import { approxReadBytes, endSeqAt, lastSeq, logFilter, readLogBatches, readLogPacked, resolveBounds, storedTimeOf, type LogBounds, type ReadLogOptions } from '../store/read-log.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseIsoTime, parsePositiveInteger, serverFrom } from './options.js';
import { recordTable, table, writeErr, writeJson, writeOut } from './render.js';
import { asDocketError, setExitCode } from './session.js';

// ---------------------------------------------------------------------------------------------
// Plumbing

async function withNats<T>(flags: CommonFlags, fn: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const servers = serverFrom(flags.server) ?? DEFAULT_NATS_URL;
  let nc: NatsConnection;
  try {
    nc = await connectNats({ servers, name: 'docket-cli' });
  } catch (err) {
    throw new UnavailableError(`cannot connect to NATS at ${servers}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  try {
    return await fn(nc);
  } catch (err) {
    if (err instanceof InvalidRequestError || err instanceof NotFoundError) throw err;
    throw asDocketError(err, servers);
  } finally {
    await nc.close().catch(() => undefined);
  }
}

interface ProgressReporter {
  readonly onBounds: (bounds: LogBounds) => void;
  update(seq: number): void;
  stop(): void;
}

/** A progress bar on stderr with rate and ETA, only when stderr is a terminal; else nothing. */
async function progressBar(label: string): Promise<ProgressReporter> {
  if (!process.stderr.isTTY) return { onBounds: () => undefined, update: () => undefined, stop: () => undefined };
  const { default: cliProgress } = await import('cli-progress');
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} {bar} {percentage}% | {value}/{total} | {rate} events/s | ETA {eta_formatted}`,
      hideCursor: true,
      clearOnComplete: true,
      etaBuffer: 50,
      fps: 5,
    },
    cliProgress.Presets.shades_classic,
  );
  let from = 1;
  let started = 0;
  let running = false;
  return {
    onBounds(bounds) {
      from = bounds.fromSeq;
      started = performance.now();
      running = true;
      bar.start(bounds.toSeq - bounds.fromSeq + 1, 0, { rate: '-' });
    },
    update(seq) {
      if (!running) return;
      const done = seq - from + 1;
      const seconds = (performance.now() - started) / 1000;
      bar.update(done, { rate: seconds > 0 ? Math.round(done / seconds).toLocaleString('en-US') : '-' });
    },
    stop() {
      if (running) bar.stop();
      running = false;
    },
  };
}

/** Reads with a progress bar; `onBatch` sees every batch of messages in stream order. */
async function readWithProgress(
  nc: NatsConnection,
  label: string,
  options: ReadLogOptions,
  onBatch: (batch: readonly RecordedMessage[]) => void | Promise<void>,
): Promise<void> {
  const progress = await progressBar(label);
  try {
    for await (const batch of readLogBatches(nc, { ...options, onBounds: progress.onBounds })) {
      await onBatch(batch);
      progress.update(batch[batch.length - 1]!.seq);
    }
  } finally {
    progress.stop();
  }
}

/**
 * `docket audit | head` closes stdout early: that ends the output, not the command with a crash.
 * (export also stops reading then.)
 */
let pipeCloseTolerated = false;
function toleratePipeClose(): void {
  // Once per process; other listeners may be there already (a pipe's own, which rethrows).
  if (pipeCloseTolerated) return;
  pipeCloseTolerated = true;
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE' && err.code !== 'ERR_STREAM_DESTROYED') throw err;
  });
}

/** Waits for stdout to drain, or for the read to stop (a closed pipe never drains). */
function drainedOrClosed(signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      process.stdout.off('drain', done);
      process.stdout.off('close', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    process.stdout.once('drain', done);
    process.stdout.once('close', done);
    signal.addEventListener('abort', done, { once: true });
    if (signal.aborted || process.stdout.destroyed) done();
  });
}

function parseQueue(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!isQueueName(value)) throw new InvalidRequestError(`--queue must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(value)}`);
  return value;
}

function parseSeq(value: string | undefined, name: string): number | undefined {
  return value === undefined ? undefined : parsePositiveInteger(value, name);
}

/** `--at` / `--diff`: a commit's stream sequence (the whole commit), a position `seq:index`, or an ISO-8601 time. */
type Point = { readonly seq: number; readonly index: number | null } | { readonly time: number };

function parsePoint(value: string, name: string): Point {
  const v = value.trim();
  if (/^\d+$/.test(v)) return { seq: Number(v), index: null };
  const at = /^(\d+):(\d+)$/.exec(v);
  if (at) {
    const index = Number(at[2]);
    if (index >= POSITION_SPAN) throw new InvalidRequestError(`${name}: an index is below ${POSITION_SPAN}, got ${index}`);
    return { seq: Number(at[1]), index };
  }
  return { time: Date.parse(parseIsoTime(v, name)) };
}

/** A point as the last position folded, its commit and index, and the clock of the view. */
interface ResolvedPoint {
  readonly position: Position;
  readonly seq: number;
  readonly index: number | null;
  readonly atMs: number;
}

/** The last position of commit `seq`: every event of it. */
function endOf(seq: number): Position {
  return positionOf(seq, POSITION_SPAN - 1);
}

async function resolvePoint(nc: NatsConnection, point: Point): Promise<ResolvedPoint> {
  if ('time' in point) {
    const seq = await endSeqAt(nc, point.time);
    return { position: endOf(seq), seq, index: null, atMs: point.time };
  }
  const last = await lastSeq(nc);
  const seq = Math.min(point.seq, last);
  const index = seq === point.seq ? point.index : null;
  const stored = seq > 0 ? await storedTimeOf(nc, seq) : null;
  // A sequence whose commit is gone (or beyond the log) is viewed at the time of the last one before it.
  const atMs = stored ?? (seq > 0 ? ((await storedTimeOf(nc, await endSeqAtOrBefore(nc, seq))) ?? 0) : 0);
  return { position: index === null ? endOf(seq) : positionOf(seq, index), seq, index, atMs };
}

async function endSeqAtOrBefore(nc: NatsConnection, seq: number): Promise<number> {
  for (let s = seq; s > 0 && seq - s < 1000; s--) if ((await storedTimeOf(nc, s)) !== null) return s;
  return 0;
}

function bytesOf(data: Uint8Array): Buffer {
  return data instanceof Buffer ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** `"retry_of":"`: a job.submitted that names the job it retries (null is written without a quote). */
const RETRY_NEEDLE = Buffer.from('"retry_of":"');

/**
 * The loader of `replay --job` and `explain`. The log has no subject per job (a commit holds many
 * jobs' events), so the first load reads the log once: it keeps the commits that mention the job
 * and, from every retry's job.submitted, the link to the job it retries; those links give the
 * whole retry chain, whose other members are then read from the job's partition only. Commits
 * are parsed only when their bytes mention the job or a retry. Every job of the chain is then
 * answered from memory; any other id has no events in the chain (an empty answer).
 */
export function createJobLoader(nc: NatsConnection): JobLoader {
  let chain: Promise<{ ids: Set<string>; commits: RecordedMessage[] }> | null = null;
  const find = async (jobId: string) => {
    const links = new Map<string, string>(); // retry -> the job it retries
    let queue: string | null = null;
    const own: RecordedMessage[] = [];
    const needle = Buffer.from(jobId);
    // A fan-out job's node entries: their later events name only their own ids (derived from the job's and the node).
    const nodeNeedles: Buffer[] = [];
    for await (const batch of readLogBatches(nc, {})) {
      for (const m of batch) {
        const bytes = bytesOf(m.data);
        const mentions = bytes.includes(needle) || (nodeNeedles.length > 0 && nodeNeedles.some((n) => bytes.includes(n)));
        if (!mentions && !bytes.includes(RETRY_NEEDLE)) continue;
        const decoded = decodeStoredCommit(m);
        if (!decoded.ok) continue;
        let holds = false;
        for (const d of decoded.events) {
          if (d.kind === 'other' && d.aggregateKind === 'jobnode' && mentions) holds = true;
          if (d.kind !== 'job') continue;
          if (d.jobId === jobId && d.event.type === 'job.submitted' && d.event.data.fan_out !== undefined) nodeNeedles.push(...d.event.data.fan_out.nodes.map((node) => Buffer.from(jobNodeId(jobId, node))));
          if (d.jobId === jobId) {
            holds = true;
            queue = d.queue;
          }
          if (d.event.type === 'job.submitted' && d.event.data.retry_of !== null) links.set(d.jobId, d.event.data.retry_of);
        }
        if (holds) own.push(m);
      }
    }
    const ids = new Set<string>([jobId]);
    if (queue === null) return { ids, commits: own };
    // The chain both ways: back through retry_of, forward through the retries naming a member.
    for (let id = links.get(jobId); id !== undefined && !ids.has(id); id = links.get(id)) ids.add(id);
    for (let grew = true; grew; ) {
      grew = false;
      for (const [retry, of] of links) {
        if (ids.has(of) && !ids.has(retry)) {
          ids.add(retry);
          grew = true;
        }
      }
    }
    if (ids.size === 1) return { ids, commits: own };
    const needles = [...ids].map((id) => Buffer.from(id));
    const commits: RecordedMessage[] = [];
    // A retry stays in its queue: the rest of the chain is in the same partition.
    for await (const batch of readLogBatches(nc, { filter: logFilter(queue) })) {
      for (const m of batch) {
        const bytes = bytesOf(m.data);
        if (needles.some((id) => bytes.includes(id))) commits.push(m);
      }
    }
    return { ids, commits };
  };
  return async (jobId: string): Promise<RecordedMessage[]> => {
    if (!isIdToken(jobId)) return [];
    chain ??= find(jobId);
    const { ids, commits } = await chain;
    return ids.has(jobId) ? commits : [];
  };
}

/** `seq:index` of an event, `seq` of a commit. */
function place(ref: EventRef): string {
  return ref.index === null ? String(ref.seq) : `${ref.seq}:${ref.index}`;
}

function n(value: number): string {
  return value.toLocaleString('en-US');
}

// ---------------------------------------------------------------------------------------------
// replay

interface ReplayFlags extends CommonFlags {
  readonly schedule?: string;
  readonly job?: string;
  readonly queue?: string;
  readonly at?: string;
  readonly diff?: string;
  readonly limit?: string;
}

function jobReplayJson(replay: JobReplay): Record<string, unknown> {
  const { state: _state, ...job } = replay.job;
  return { job, chain: replay.chain, retry_of: replay.retry_of, retried_by: replay.retried_by };
}

/** A fan-out job's nodes (replay --job, explain). */
function printFanOut(fanOut: JobTimeline['fan_out']): void {
  if (fanOut === null) return;
  writeOut(`fan-out: quorum ${fanOut.quorum} of ${fanOut.nodes.length} nodes`);
  writeOut(table(['node', 'status', 'attempt', 'claims', 'job node'], fanOut.nodes.map((n) => [n.node, n.status, n.attempt, n.claims, n.jobnode_id])));
}

function printJobReplay(replay: JobReplay): void {
  const j = replay.job;
  writeOut(
    recordTable([
      ['job', j.job_id],
      ['queue', j.queue],
      ['status', j.status],
      ['attempt', `${j.attempt} of ${j.max_attempts}`],
      ['retry of', replay.retry_of],
      ['retried by', replay.retried_by],
      ['priority', j.priority],
      ['position', j.position ?? `(the submit's position, ${j.submit_seq}:${j.submit_index})`],
      ['key', j.key],
      ['created', j.created_at],
      ['run at', j.run_at],
      ['finished', j.finished_at],
    ]),
  );
  writeOut(
    table(
      ['at', 'stored at', 'event time', 'event', 'job', 'run', 'note'],
      j.events.map((e) => [
        place(e),
        e.stored_at,
        e.time,
        e.type,
        e.before.job === e.after.job ? e.after.job : `${e.before.job} -> ${e.after.job}`,
        e.before.run === e.after.run ? e.after.run : `${e.before.run} -> ${e.after.run}`,
        e.problem ?? (e.accepted ? '' : 'REFUSED by the machines (run docket audit)') + (e.jobnode ? `${e.accepted ? '' : ' '}node ${e.jobnode.node}: ${e.jobnode.before === e.jobnode.after ? e.jobnode.after : `${e.jobnode.before} -> ${e.jobnode.after}`}` : ''),
      ]),
    ),
  );
  printFanOut(j.fan_out);
  if (j.run) {
    const r = j.run;
    writeOut(
      recordTable([
        ['run', r.run_id],
        ['status', r.status],
        ['worker', r.worker],
        ['host', r.host],
        ['pid', r.pid],
        ['version', r.version],
        ['lease ms', r.lease_ms],
        ['started', r.started_at],
        ['finished', r.finished_at],
        ['duration ms', r.duration_ms],
        ['failure', r.failure_reason],
        ['error', r.error?.message],
        ['exit code', r.exit_code],
        ['artifacts', r.artifacts],
      ]),
    );
  } else {
    writeOut('no run: the job was never claimed');
  }
  if (replay.chain.length > 1) {
    writeOut('retry chain:');
    writeOut(
      table(
        ['attempt', 'job', 'status', 'retry of', 'created', 'run at', 'failure', 'error'],
        replay.chain.map((l) => [l.attempt, l.job_id === j.job_id ? `${l.job_id} *` : l.job_id, l.status, l.retry_of, l.created_at, l.run_at, l.failure_reason, l.error]),
      ),
    );
  }
}

function printQueueView(view: QueueView, limit: number): void {
  writeOut(`queue ${view.queue} at ${place(view)} (${view.at})`);
  const shown = view.ready.slice(0, limit);
  writeOut(`ready: ${view.ready.length}`);
  if (shown.length > 0) {
    writeOut(table(['#', 'job', 'priority', 'position', 'submitted at', 'run at', 'attempt'], shown.map((r, i) => [i, r.job_id, r.priority, r.position, place(r), r.run_at, r.attempt])));
    if (view.ready.length > limit) writeOut(`... and ${view.ready.length - limit} more (--limit)`);
  }
  writeOut(`delayed: ${view.delayed.length}`);
  if (view.delayed.length > 0) {
    writeOut(table(['job', 'run at'], view.delayed.slice(0, limit).map((d) => [d.job_id, d.run_at])));
    if (view.delayed.length > limit) writeOut(`... and ${view.delayed.length - limit} more (--limit)`);
  }
  writeOut(`running: ${view.running.length}`);
  if (view.running.length > 0) {
    writeOut(
      table(
        ['job', 'run', 'worker', 'host', 'pid', 'version', 'started', 'lease ms', 'attempt'],
        view.running.slice(0, limit).map((r) => [r.job_id, r.run_id, r.worker, r.host, r.pid, r.version, r.started_at, r.lease_ms, r.attempt]),
      ),
    );
    if (view.running.length > limit) writeOut(`... and ${view.running.length - limit} more (--limit)`);
  }
  const p = view.progress;
  writeOut(table(['waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped', 'ignored', 'total'], [[p.counts.waiting, p.counts.queued, p.counts.running, p.counts.succeeded, p.counts.failed, p.counts.cancelled, p.counts.skipped, p.counts.ignored, p.total]]));
  if (view.refused > 0 || view.undecodable > 0) writeErr(`warning: ${view.refused} refused and ${view.undecodable} undecodable events were skipped; run docket audit`);
}

function printDiff(d: QueueDiff, limit: number): void {
  writeOut(`queue ${d.queue}: ${place(d.from)} (${d.from.at}) -> ${place(d.to)} (${d.to.at})`);
  const list = (ids: readonly string[]) => (ids.length === 0 ? '-' : ids.length > limit ? `${ids.slice(0, limit).join(', ')} ... (+${ids.length - limit})` : ids.join(', '));
  writeOut(
    recordTable([
      ['ready, joined', list(d.ready.added)],
      ['ready, left', list(d.ready.removed)],
      ['ready, moved', d.ready.moved.length === 0 ? '-' : d.ready.moved.slice(0, limit).map((m) => `${m.job_id} ${m.from}->${m.to}`).join(', ')],
      ['delayed, joined', list(d.delayed.added)],
      ['delayed, left', list(d.delayed.removed)],
      ['runs started', list(d.running.started)],
      ['runs ended', list(d.running.ended)],
      ['counts', Object.keys(d.progress).length === 0 ? '-' : Object.entries(d.progress).map(([k, v]) => `${k} ${v > 0 ? '+' : ''}${v}`).join(', ')],
    ]),
  );
}

async function replayAction(flags: ReplayFlags): Promise<void> {
  toleratePipeClose();
  const limit = flags.limit === undefined ? 50 : parsePositiveInteger(flags.limit, '--limit');
  if (flags.schedule !== undefined) {
    if (flags.job !== undefined || flags.queue !== undefined) throw new InvalidRequestError('give --schedule, --job, or --queue with --at: one of them');
    const name = flags.schedule;
    const replay = await withNats(flags, async (nc) => {
      const replayer = new ScheduleReplayer(name);
      await readWithProgress(nc, 'replay', { filter: subjects.partition(SYS_PARTITION) }, (batch) => {
        for (const m of batch) replayer.push(m);
      });
      return replayer.result();
    });
    if (replay.entries.length === 0) throw new NotFoundError(`no events for schedule ${name}`);
    printScheduleReplay(replay, flags.json === true, limit);
    return;
  }
  if (flags.job !== undefined) {
    if (flags.queue !== undefined || flags.at !== undefined) throw new InvalidRequestError('give --job, or --queue with --at, not both');
    const jobId = flags.job;
    if (!isIdToken(jobId)) throw new InvalidRequestError(`--job must be a job id ([A-Za-z0-9_-]{1,128}), got ${JSON.stringify(jobId)}`);
    const replay = await withNats(flags, (nc) => replayJob(jobId, positionalJobLoader(nc, createJobLoader(nc)), retryJobId));
    if (replay === null) throw new NotFoundError(`no events for job ${jobId}`);
    if (flags.json) writeJson({ ok: true, ...jobReplayJson(replay) });
    else printJobReplay(replay);
    return;
  }
  const queue = parseQueue(flags.queue);
  if (queue === undefined || flags.at === undefined) throw new InvalidRequestError('replay needs --job <id>, or --queue <q> with --at <seq|ISO time>');
  const at = parsePoint(flags.at, '--at');
  const other = flags.diff === undefined ? undefined : parsePoint(flags.diff, '--diff');
  const { views, diff } = await withNats(flags, async (nc) => {
    const a = await resolvePoint(nc, at);
    const b = other === undefined ? undefined : await resolvePoint(nc, other);
    const points = b === undefined ? [a] : [a, b].sort((x, y) => x.position - y.position);
    const replay = new QueueReplay(queue, points[0]!.atMs);
    const captured = new Map<(typeof points)[number], QueueView>();
    /** Views every point at or before `upTo` not viewed yet: called before folding the event after it. */
    const capture = (upTo: Position): void => {
      for (const p of points) {
        if (captured.has(p) || p.position > upTo) continue;
        replay.atMs = p.atMs;
        captured.set(p, { ...replay.view(), seq: p.seq, index: p.index });
      }
    };
    const end = points[points.length - 1]!.seq;
    if (end > 0) {
      await readWithProgress(nc, 'replay', { filter: logFilter(queue), toSeq: end }, (batch) => {
        for (const m of batch) {
          const decoded = decodeStoredCommit(m);
          if (!decoded.ok) {
            capture(positionOf(m.seq, 0) - 1);
            replay.pushDecoded(m, decoded);
            continue;
          }
          const events = decoded.events;
          for (let i = 0; i < events.length; i++) {
            const position = positionOf(m.seq, i);
            capture(position - 1);
            replay.pushEvent(position, events[i]!);
          }
        }
      });
    }
    capture(Number.MAX_SAFE_INTEGER);
    const viewA = captured.get(a)!;
    if (b === undefined) return { views: [viewA], diff: undefined };
    const viewB = captured.get(b)!;
    return { views: [viewA, viewB], diff: diffQueueViews(viewA, viewB) };
  });
  if (flags.json) {
    writeJson(diff === undefined ? { ok: true, view: views[0] } : { ok: true, view: views[0], other: views[1], diff });
    return;
  }
  printQueueView(views[0]!, limit);
  if (diff !== undefined) {
    writeOut('');
    printDiff(diff, limit);
  }
}

// ---------------------------------------------------------------------------------------------
// audit

interface AuditFlags extends CommonFlags {
  readonly queue?: string;
  readonly from?: string;
  readonly to?: string;
  readonly max?: string;
  readonly thread?: string;
}

function parseThread(value: string | undefined): boolean | 'auto' {
  if (value === undefined || value === 'auto') return 'auto';
  if (value === 'on') return true;
  if (value === 'off') return false;
  throw new InvalidRequestError(`--thread must be auto, on or off, got ${JSON.stringify(value)}`);
}

export interface AuditLogOptions {
  readonly queue?: string;
  /** Report violations in commits from this stream sequence on (the fold always starts at the beginning). */
  readonly fromSeq?: number;
  readonly toSeq?: number;
  /** @defaultValue 1000 */
  readonly maxViolations?: number;
  /**
   * Audit on a worker thread beside the reader. `auto` does for a large read on two cores or
   * more (src/audit/threaded.ts `autoThread`: the thread's cold start is paid back only by a long
   * read), inline otherwise.
   * @defaultValue 'auto'
   */
  readonly thread?: boolean | 'auto';
  readonly onBounds?: (bounds: LogBounds) => void;
  /** Called with the last sequence read, per batch handed to the audit. */
  readonly onProgress?: (seq: number) => void;
}

/**
 * Reads DOCKET (or one queue) from the beginning and audits it: the reader packs commits into
 * batches for the audit, inline or on a worker thread (`thread: true`), where reading and
 * auditing overlap.
 */
export async function auditLog(nc: NatsConnection, options: AuditLogOptions = {}): Promise<{ report: AuditReport; mode: PackedAudit['mode'] }> {
  const filter = options.queue === undefined ? undefined : logFilter(options.queue);
  const readOptions: ReadLogOptions = { ...(filter === undefined ? {} : { filter }), ...(options.toSeq === undefined ? {} : { toSeq: options.toSeq }) };
  const bounds = await resolveBounds(nc, readOptions);
  const auditOptions = {
    ...(options.fromSeq === undefined ? {} : { fromSeq: options.fromSeq }),
    ...(options.toSeq === undefined ? {} : { toSeq: options.toSeq }),
    maxViolations: options.maxViolations ?? 1000,
  };
  const thread = options.thread === undefined || options.thread === 'auto' ? bounds !== null && autoThread(await approxReadBytes(nc, bounds, filter), availableParallelism()) : options.thread;
  const audit = await startPackedAudit({ ...auditOptions, thread });
  if (bounds !== null) {
    options.onBounds?.(bounds);
    const sink = {
      write(buffer: ArrayBuffer, count: number, last: number) {
        audit.write(buffer, count, last);
        options.onProgress?.(last);
      },
      get backlog() {
        return audit.backlog;
      },
      whenBelow: (n: number) => audit.whenBelow(n),
    };
    try {
      await readLogPacked(nc, { ...readOptions, fromSeq: bounds.fromSeq, toSeq: bounds.toSeq }, sink, (flush) => new PackWriter(flush));
    } catch (err) {
      await audit.finish().catch(() => undefined);
      throw err;
    }
  }
  return { report: await audit.finish(), mode: audit.mode };
}

async function auditAction(flags: AuditFlags): Promise<void> {
  toleratePipeClose();
  const queue = parseQueue(flags.queue);
  const fromSeq = parseSeq(flags.from, '--from');
  const toSeq = parseSeq(flags.to, '--to');
  const maxViolations = flags.max === undefined ? 1000 : parsePositiveInteger(flags.max, '--max');
  const thread = parseThread(flags.thread);
  const started = performance.now();
  let mode = 'inline';
  const report: AuditReport = await withNats(flags, async (nc) => {
    const progress = await progressBar('audit');
    try {
      // The fold always starts at the beginning: a job's state at --from depends on its earlier events.
      const result = await auditLog(nc, {
        ...(queue === undefined ? {} : { queue }),
        ...(fromSeq === undefined ? {} : { fromSeq }),
        ...(toSeq === undefined ? {} : { toSeq }),
        maxViolations,
        thread,
        onBounds: progress.onBounds,
        onProgress: (seq) => progress.update(seq),
      });
      mode = result.mode;
      return result.report;
    } finally {
      progress.stop();
    }
  });
  const ms = performance.now() - started;
  const rate = ms > 0 ? Math.round((report.events * 1000) / ms) : 0;
  setExitCode(report.ok ? 0 : 1);
  if (flags.json) {
    writeJson({ ...report, queue: queue ?? null, from: fromSeq ?? null, to: toSeq ?? null, ms: Math.round(ms), events_per_second: rate, mode });
    return;
  }
  const range = report.firstSeq === null ? 'an empty log' : `seq ${report.firstSeq}..${report.lastSeq}`;
  writeOut(
    `audited ${n(report.events)} events in ${n(report.messages)} commits (${range}${queue ? `, queue ${queue}` : ''}) of ${n(report.jobs)} jobs in ${(ms / 1000).toFixed(1)} s (${n(rate)} events/s): ` +
      (report.ok ? 'no violations' : `${n(report.violationCount)} violation${report.violationCount === 1 ? '' : 's'}`),
  );
  if (report.otherEvents > 0) writeOut(`${n(report.otherEvents)} events of queues, schedules, reservations and groups: their commits' chain and partition checked, not their transitions`);
  if (report.pendingFires > 0) writeOut(`${n(report.pendingFires)} schedule fire${report.pendingFires === 1 ? '' : 's'} whose job is not in the log yet, too recent to judge: pending, not violations`);
  if (report.ok) return;
  writeOut(table(['rule', 'count'], Object.entries(report.byRule).filter(([, c]) => c > 0)));
  writeOut(table(['at', 'rule', 'aggregate', 'events', 'message'], report.violations.map((v) => [place(v), v.rule, v.aggregate, v.events.map(place).join(' '), v.message])));
  if (report.truncated) writeOut(`... ${n(report.violationCount - report.violations.length)} more not listed (--max)`);
}

// ---------------------------------------------------------------------------------------------
// explain

/**
 * Why a job ran when it did: its queue's partition folded up to its claim (Explainer), and for a
 * job submitted waiting, the whole log read for the jobs that held it (WaitCollector).
 */
export async function explainJob(nc: NatsConnection, jobId: string): Promise<Explanation & { readonly fan_out: JobTimeline['fan_out'] }> {
  const job = await replayJob(jobId, positionalJobLoader(nc, createJobLoader(nc)), retryJobId);
  if (job === null) throw new NotFoundError(`no events for job ${jobId}`);
  const explainer = new Explainer(job, Date.now());
  const stop = new AbortController();
  await readWithProgress(nc, 'explain', { filter: logFilter(job.job.queue), signal: stop.signal }, (batch) => {
    for (const m of batch) {
      explainer.push(m);
      if (explainer.done) {
        stop.abort();
        break;
      }
    }
  });
  const fanOut = { fan_out: job.job.fan_out };
  if (!submittedWaiting(job.job)) return { ...explainer.explanation(), ...fanOut };
  const waits = new WaitCollector(job.job, retryJobId);
  await readWithProgress(nc, 'explain waits', {}, (batch) => {
    for (const m of batch) if (waits.mentions(bytesOf(m.data))) waits.push(m);
  });
  return { ...explainer.explanation(waits.waits()), ...fanOut };
}

async function explainAction(jobId: string, flags: CommonFlags): Promise<void> {
  toleratePipeClose();
  if (!isIdToken(jobId)) throw new InvalidRequestError(`job id must be [A-Za-z0-9_-]{1,128}, got ${JSON.stringify(jobId)}`);
  const explanation = await withNats(flags, (nc) => explainJob(nc, jobId));
  if (flags.json) {
    writeJson({ ok: true, ...explanation });
    return;
  }
  const e = explanation;
  writeOut(
    recordTable([
      ['job', e.job_id],
      ['queue', e.queue],
      ['status', e.status],
      ['order key', e.order_key ? `priority ${e.order_key.priority}, position ${e.order_key.position}, submitted at ${place(e.order_key)}` : null],
      [e.claim ? 'place at claim' : 'place now', e.place === null ? 'not in the ready order' : `${e.place} of ${e.ready_count} ready`],
      ['created', e.delays.created_at],
      ['run at', e.delays.run_at],
      ['requested delay ms', e.delays.requested_delay_ms],
      ['ready at', e.delays.ready_at],
      ['waited ms', e.delays.waited_ms],
      ['claim', e.claim ? `${place(e.claim)} at ${e.claim.time}: run ${e.claim.run_id} by ${e.claim.worker} on ${e.claim.host} (pid ${e.claim.pid}, v${e.claim.version}, lease ${e.claim.lease_ms} ms)` : 'never claimed'],
    ]),
  );
  if (e.ahead.length > 0) {
    writeOut('stood ahead:');
    writeOut(
      table(
        ['job', 'priority', 'position', 'submitted at', 'then', 'at', 'worker'],
        e.ahead.map((a) => [a.job_id, a.priority, a.position, place(a), a.fate, a.fate_seq === null ? null : place({ seq: a.fate_seq, index: a.fate_index }), a.fate_worker]),
      ),
    );
  }
  if (e.retries.length > 1) {
    writeOut('retries:');
    writeOut(table(['attempt', 'job', 'status', 'run at', 'failure', 'error'], e.retries.map((l) => [l.attempt, l.job_id, l.status, l.run_at, l.failure_reason, l.error])));
  }
  printFanOut(e.fan_out);
  for (const note of e.notes) writeOut(`note: ${note}`);
}

// ---------------------------------------------------------------------------------------------
// export

interface ExportFlags extends CommonFlags {
  readonly queue?: string;
  readonly from?: string;
  readonly to?: string;
  readonly format?: string;
}

async function exportAction(flags: ExportFlags): Promise<void> {
  toleratePipeClose();
  const format = flags.format ?? 'jsonl';
  if (format !== 'jsonl') throw new InvalidRequestError(`--format must be jsonl, got ${JSON.stringify(format)}`);
  const queue = parseQueue(flags.queue);
  const fromSeq = parseSeq(flags.from, '--from');
  const toSeq = parseSeq(flags.to, '--to');
  const stop = new AbortController();
  // `docket export | head` closes stdout early: that is the end, not an error.
  const onError = (err: NodeJS.ErrnoException): void => {
    if (err.code === 'EPIPE') stop.abort();
  };
  process.stdout.on('error', onError);
  try {
    await withNats(flags, (nc) =>
      readWithProgress(
        nc,
        'export',
        {
          ...(queue === undefined ? {} : { filter: logFilter(queue) }),
          ...(fromSeq === undefined ? {} : { fromSeq }),
          ...(toSeq === undefined ? {} : { toSeq }),
          signal: stop.signal,
        },
        async (batch) => {
          if (stop.signal.aborted) return;
          let chunk = '';
          for (const m of batch) for (const line of toExportLines(m)) chunk += `${line}\n`;
          if (!process.stdout.write(chunk)) await drainedOrClosed(stop.signal);
        },
      ),
    );
  } finally {
    process.stdout.off('error', onError);
  }
}

// ---------------------------------------------------------------------------------------------

export function registerAuditCommands(program: Command): void {
  withCommonOptions(
    program
      .command('replay')
      .description("a job's timeline with its run and retry chain (--job), a schedule's fires and misses (--schedule), or a queue as it stood at a point of the log (--queue --at)")
      .option('--schedule <name>', "replay a schedule: its puts, fires and misses (with reasons), each folded through the Schedule machine")
      .option('--job <job_id>', 'replay one job: every event with the state before and after, its run, its retry chain')
      .option('--queue <queue>', 'replay a queue: ready order, delayed jobs, running runs, counts')
      .option('--at <point>', 'a commit sequence (all its events), a position seq:index, or an ISO-8601 time (the last commit stored by then)')
      .option('--diff <point>', 'a second point: show what changed between the two')
      .option('--limit <n>', 'rows per table for people (JSON has all)', '50'),
  ).action((flags: ReplayFlags) => replayAction(flags));

  withCommonOptions(
    program
      .command('audit')
      .description('fold the log through the machines and check every rule; exits 1 when there is any violation')
      .option('--queue <queue>', 'only this queue')
      .option('--from <seq>', 'report violations in commits from this sequence (the fold still starts at the beginning)')
      .option('--to <seq>', 'stop at this commit sequence')
      .option('--max <n>', 'list at most this many violations (the counts stay exact)', '1000')
      .option('--thread <mode>', `fold on a worker thread beside the reader: on, off, or auto (on for a read of ${AUTO_THREAD_MIN_BYTES / 2 ** 20} MiB or more on 2+ cores)`, 'auto'),
  ).action((flags: AuditFlags) => auditAction(flags));

  withCommonOptions(
    program
      .command('explain')
      .description('why a job ran when it did: its order key at claim time, what stood ahead, delays, retries, the claim that won')
      .argument('<job_id>', 'the job'),
  ).action((jobId: string, flags: CommonFlags) => explainAction(jobId, flags));

  withCommonOptions(
    program
      .command('export')
      .description('the log as JSON lines (one event per line with its commit, stable field order) for external tools')
      .option('--queue <queue>', 'only this queue')
      .option('--from <seq>', 'first commit sequence')
      .option('--to <seq>', 'last commit sequence')
      .option('--format <format>', 'jsonl', 'jsonl'),
  ).action((flags: ExportFlags) => exportAction(flags));
}
