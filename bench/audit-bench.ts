/**
 * The audit benchmark (issue 4, log v2 in issue 11): writes a legal 1,000,000-event log to DOCKET
 * on the given server as commits of EVENTS_PER_COMMIT events with docket's headers and hash chain
 * (a lean pipelined publish), then measures in the same run the raw read rate (ordered consumer,
 * 10,000-message pulls, nothing decoded) and the audit rate (the same read, plus headers, one
 * JSON.parse and one SHA-256 per commit, shape checks and the fold through the machines with
 * every rule checked), alternating R A R A so that neither always runs on a colder or busier
 * machine. Rates are in events/s.
 *
 * The log: jobs interleaved 1,000 at a time through their lifecycles; 70% submit, claim,
 * artifact, succeed; 20% submit, move, claim, fail, then a retry that is claimed and succeeds;
 * 10% submit and cancel. The audit must find it clean (a violation here is a bug, so it throws).
 *
 * Run alone: npx tsx bench/audit-bench.ts [events]
 */
import { createHash } from 'node:crypto';
import { createInbox, headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import type { JobEvent } from '../machines/index.js';
import type { AuditReport } from '../src/audit/index.js';
import { retryJobId } from '../src/ids.js';
import { encodeCommit } from '../src/nats/codec.js';
import { connectNats } from '../src/nats/connection.js';
import { ensureStream } from '../src/nats/streams.js';
import { EXPECTED_HEADER, MSG_ID_HEADER, STREAM } from '../src/nats/subjects.js';
import { measureRawRead } from '../src/store/read-log.js';
import { auditLog } from '../src/cli/audit-commands.js';

export interface AuditBenchOptions {
  /** Events to write. @defaultValue 1_000_000 */
  readonly events?: number;
  /** Read and audit passes each (alternating). @defaultValue 2 */
  readonly passes?: number;
  /** Progress lines (stderr by default). */
  readonly log?: (line: string) => void;
}

export interface AuditBenchResult {
  /** Best audit rate over the passes and both modes (thread, one thread), events/s: read + decode + fold + rules. */
  readonly audit: number;
  /** Best raw read rate over the passes, events/s. */
  readonly read: number;
  /** audit / read (target: at least 0.5). */
  readonly ratio: number;
  readonly events: number;
  readonly commits: number;
  readonly events_per_commit: number;
  readonly jobs: number;
  /** Events written per second. */
  readonly write_per_s: number;
  readonly reads: readonly number[];
  /** The same audit with reading and folding on one thread (best pass), events/s. */
  readonly audit_one_thread: number;
  readonly audits_one_thread: readonly number[];
  /** Where the threaded passes ran: 'thread' (a worker beside the reader), or 'inline' when no thread could start. */
  readonly audit_mode: string;
  /** The threaded passes, events/s. */
  readonly audits: readonly number[];
  readonly violations: number;
  /** This process's CPU per event (user + system, all threads), per pass. */
  readonly cpu_us_per_event: { readonly read: readonly number[]; readonly audit: readonly number[]; readonly audit_one_thread: readonly number[] };
}

const QUEUE = 'bench';
const SUBJECT = `docket.log.q.${QUEUE}`;
/** Events per commit: what a leader's group commit holds under load. */
export const EVENTS_PER_COMMIT = 100;
const WINDOW_JOBS = 1_000;
const META = { node: 'bench-node' } as const;
const BACKOFF = { base_ms: 1_000, max_ms: 60_000, jitter: 0.2 } as const;
const T0 = Date.UTC(2026, 0, 5, 9, 0, 0);

interface Planned {
  readonly event: JobEvent;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** The events of job `n`'s whole chain, in order (a retry's events follow its failure). */
function lifecycle(n: number): Planned[] {
  const jobId = `J${n.toString(36).padStart(12, '0')}`;
  const base = T0 + n * 5;
  let k = 0;
  const ev = (type: JobEvent['type'], data: unknown, at: number, id = jobId): Planned => ({
    event: { id: `E${id}-${k++}`, type, time: iso(at), aggregate: { kind: 'job', id }, queue: QUEUE, data, meta: META } as JobEvent,
  });
  const submitted = (id: string, attempt: number, retryOf: string | null, runAt: number): Planned =>
    ev(
      'job.submitted',
      {
        job_id: id,
        key: null,
        params: { image: `s3://uploads/${n}.jpg`, sizes: [64, 256, 1024] },
        priority: n % 10,
        position: null,
        run_at: iso(runAt),
        max_attempts: 3,
        backoff: BACKOFF,
        attempt,
        retry_of: retryOf,
        waiting: false,
      },
      runAt,
      id,
    );
  const claimed = (runId: string, at: number, id = jobId): Planned =>
    ev('job.claimed', { run_id: runId, worker: `worker-${n % 16}`, host: 'bench-host', pid: 4242, version: '1.4.2', lease_ms: 30_000 }, at, id);
  const kind = n % 10;
  const runId = `R${jobId}`;
  if (kind < 7) {
    return [
      submitted(jobId, 1, null, base),
      claimed(runId, base + 1_000),
      ev('job.artifact_added', { run_id: runId, artifact: { name: 'thumb.png', uri: `s3://thumbs/${n}.png` } }, base + 1_200),
      ev('job.succeeded', { run_id: runId, result: { thumbs: 3 } }, base + 1_500),
    ];
  }
  if (kind < 9) {
    const retryId = retryJobId(jobId, 1);
    return [
      submitted(jobId, 1, null, base),
      ev('job.moved', { priority: 0, position: null }, base + 10),
      claimed(runId, base + 1_000),
      ev('job.failed', { run_id: runId, reason: 'error', error: { message: 'decoder: truncated JPEG', retryable: true } }, base + 1_500),
      submitted(retryId, 2, jobId, base + 2_500),
      claimed(`R${retryId}`, base + 3_000, retryId),
      ev('job.succeeded', { run_id: `R${retryId}`, result: { thumbs: 3 } }, base + 3_500, retryId),
    ];
  }
  return [submitted(jobId, 1, null, base), ev('job.cancelled', { reason: 'superseded' }, base + 200)];
}

/** The log in stream order: windows of jobs moving through their lifecycles together. */
export function* plannedLog(events: number): Generator<Planned> {
  let emitted = 0;
  for (let start = 0; emitted < events; start += WINDOW_JOBS) {
    const chains = Array.from({ length: WINDOW_JOBS }, (_, i) => lifecycle(start + i));
    for (let step = 0; step < 7 && emitted < events; step++) {
      for (const chain of chains) {
        const planned = chain[step];
        if (planned === undefined) continue;
        yield planned;
        if (++emitted >= events) return;
      }
    }
  }
}

/**
 * Publishes the planned log as commits of `EVENTS_PER_COMMIT` events (one partition, chained by
 * prev_hash) with up to `window` appends awaiting their PubAck. The expected last subject
 * sequence of each commit is computed from the sequence the stream will give it (one publisher,
 * stream order = publish order); a refusal means that assumption broke: it throws.
 */
export async function writeLog(nc: NatsConnection, events: number, firstSeq: number, window = 64): Promise<{ jobs: number; commits: number }> {
  const inbox = createInbox();
  const decoder = new TextDecoder();
  const source = plannedLog(events);
  const commits = Math.ceil(events / EVENTS_PER_COMMIT);
  let prevHash: string | null = null;
  let jobs = 0;
  let sent = 0;
  let acked = 0;
  return new Promise((resolve, reject) => {
    let failed = false;
    const sub = nc.subscribe(`${inbox}.*`, {
      callback: (err, msg) => {
        if (failed) return;
        const text = decoder.decode(msg.data);
        if (err || text.length === 0 || text.includes('"error"') || text.includes('"duplicate"')) {
          failed = true;
          sub.unsubscribe();
          reject(err ?? new Error(`append refused: ${text || `status ${msg.headers?.code}`}`));
          return;
        }
        acked += 1;
        if (acked === commits) {
          sub.unsubscribe();
          resolve({ jobs, commits });
        } else {
          send();
        }
      },
    });
    function send(): void {
      if (sent >= commits) return;
      const batch: JobEvent[] = [];
      while (batch.length < EVENTS_PER_COMMIT) {
        const next = source.next();
        if (next.done) break;
        batch.push(next.value.event);
        if (next.value.event.type === 'job.submitted') jobs += 1;
      }
      const seq = firstSeq + sent;
      const id = `bench-1-${sent + 1}`;
      // As a node stores it (a submit without the fields that hold their absent values).
      const payload = encodeCommit({ commit: id, partition: `q.${QUEUE}`, writer: { node: 'bench-node', epoch: 1 }, prev_hash: prevHash, events: batch });
      prevHash = createHash('sha256').update(payload).digest('hex');
      const h = natsHeaders();
      h.set(MSG_ID_HEADER, id);
      h.set(EXPECTED_HEADER, String(sent === 0 ? 0 : seq - 1));
      nc.publish(SUBJECT, payload, { reply: `${inbox}.${sent}`, headers: h });
      sent += 1;
    }
    for (let i = 0; i < Math.min(window, commits); i++) send();
  });
}

/**
 * One audit pass over the whole stream as `docket audit` runs it: `thread` folds on a worker
 * thread beside the reader (`--thread on`); `inline` reads and folds on one thread (`--thread off`).
 */
export async function measureAudit(nc: NatsConnection, mode: 'thread' | 'inline' = 'thread'): Promise<{ perSecond: number; ms: number; report: AuditReport; mode: string }> {
  const started = performance.now();
  const { report, mode: ran } = await auditLog(nc, { thread: mode === 'thread', maxViolations: 100 });
  const ms = performance.now() - started;
  return { perSecond: (report.events * 1000) / ms, ms, report, mode: ran };
}

export async function benchAuditVsRead(url: string, options: AuditBenchOptions = {}): Promise<AuditBenchResult> {
  const events = options.events ?? 1_000_000;
  const passes = options.passes ?? 2;
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const nc = await connectNats({ servers: url, name: 'docket-audit-bench' });
  try {
    const jsm = await ensureStream(nc);
    const before = (await jsm.streams.info(STREAM)).state;
    if (before.messages !== 0) throw new Error(`benchAuditVsRead needs an empty ${STREAM} stream (it holds ${before.messages} messages)`);
    const writeStarted = performance.now();
    const { jobs, commits } = await writeLog(nc, events, before.last_seq + 1);
    const writeMs = performance.now() - writeStarted;
    log(`audit bench: wrote ${events} events (${jobs} jobs) in ${commits} commits in ${(writeMs / 1000).toFixed(1)} s`);
    const reads: number[] = [];
    const audits: number[] = [];
    let violations = 0;
    const cpuUs = { read: [] as number[], audit: [] as number[], audit_inline: [] as number[] };
    const inlines: number[] = [];
    let mode = 'thread';
    const check = (audit: Awaited<ReturnType<typeof measureAudit>>) => {
      if (audit.report.events !== events || audit.report.messages !== commits) throw new Error(`audit saw ${audit.report.events} of ${events} events in ${audit.report.messages} of ${commits} commits`);
      if (!audit.report.ok) throw new Error(`audit of a legal log found ${audit.report.violationCount} violations, first: ${JSON.stringify(audit.report.violations[0])}`);
      violations += audit.report.violationCount;
    };
    // CPU of this process, all threads (user + system), per event.
    const cpuPerEvent = async <T>(into: number[], fn: () => Promise<T>): Promise<T> => {
      const cpu = process.cpuUsage();
      const result = await fn();
      const used = process.cpuUsage(cpu);
      into.push((used.user + used.system) / events);
      return result;
    };
    for (let pass = 0; pass < passes; pass++) {
      const read = await cpuPerEvent(cpuUs.read, () => measureRawRead(nc));
      if (read.messages !== commits) throw new Error(`raw read saw ${read.messages} of ${commits} commits`);
      // The raw read counts commits; its rate in events is what it carried.
      reads.push(Math.round((read.perSecond * events) / commits));
      const audit = await cpuPerEvent(cpuUs.audit, () => measureAudit(nc, 'thread'));
      check(audit);
      mode = audit.mode;
      audits.push(Math.round(audit.perSecond));
      const inline = await cpuPerEvent(cpuUs.audit_inline, () => measureAudit(nc, 'inline'));
      check(inline);
      inlines.push(Math.round(inline.perSecond));
      log(
        `audit bench pass ${pass + 1}: raw read ${reads[pass]} events/s; audit (${mode}) ${audits[pass]} events/s = ${((audits[pass]! / reads[pass]!) * 100).toFixed(0)}%; ` +
          `audit on one thread ${inlines[pass]} events/s = ${((inlines[pass]! / reads[pass]!) * 100).toFixed(0)}%; ` +
          `CPU µs/event read ${cpuUs.read[pass]!.toFixed(2)}, audit ${cpuUs.audit[pass]!.toFixed(2)}, one thread ${cpuUs.audit_inline[pass]!.toFixed(2)}`,
      );
    }
    // docket audit runs either way (`--thread auto|on|off`); the row takes the better of the two.
    const audit = Math.max(...audits, ...inlines);
    const read = Math.max(...reads);
    const round2 = (xs: number[]) => xs.map((x) => Math.round(x * 100) / 100);
    return {
      audit,
      read,
      ratio: audit / read,
      events,
      commits,
      events_per_commit: EVENTS_PER_COMMIT,
      jobs,
      write_per_s: Math.round((events * 1000) / writeMs),
      audits,
      reads,
      audit_one_thread: Math.max(...inlines),
      audits_one_thread: inlines,
      audit_mode: mode,
      violations,
      cpu_us_per_event: { read: round2(cpuUs.read), audit: round2(cpuUs.audit), audit_one_thread: round2(cpuUs.audit_inline) },
    };
  } finally {
    await nc.close();
  }
}

// Run alone: starts its own nats-server.
if (import.meta.url === `file://${process.argv[1]}`) {
  const { startNatsServer } = await import('../test/support/nats-server.js');
  const server = await startNatsServer();
  try {
    const result = await benchAuditVsRead(server.url, { events: Number(process.argv[2] ?? 1_000_000) });
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await server.stop();
  }
}
