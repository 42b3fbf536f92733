/**
 * Builds job histories for the audit and replay tests: legal lifecycles (submit, claim,
 * succeed/fail, retries as new jobs with derived ids) and hand-made tampering. A history is a
 * list of entries; `toRecorded` turns it into stored messages as DOCKET would hold them (for the
 * pure tests), `publishHistory` appends it to a real stream with docket's headers.
 */
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { jetstream, type PubAck } from '@nats-io/jetstream';
import type { Envelope, JobEvent, JobEventType } from '../../machines/index.js';
import type { RecordedMessage } from '../../src/audit/index.js';
import { retryJobId } from '../../src/ids.js';

export const T0 = Date.parse('2030-01-01T00:00:00.000Z');

export interface EntryHeaders {
  /** The expected last subject sequence to send; null sends none (an unguarded append); undefined computes the right one. */
  readonly expected?: number | null;
  /** The Nats-Msg-Id to send; null sends none; undefined sends the event id. */
  readonly msgId?: string | null;
}

export interface HistoryEntry {
  readonly subject: string;
  /** The envelope, or raw bytes for an undecodable message. */
  readonly event: Envelope | Uint8Array;
  readonly headers: EntryHeaders;
}

interface JobInfo {
  readonly queue: string;
  attempt: number;
  maxAttempts: number;
  runId: string | null;
  runs: number;
  runAtMs: number;
}

export interface SubmitOptions {
  readonly priority?: number;
  readonly position?: number | null;
  /** run_at relative to the event's time. */
  readonly delayMs?: number;
  readonly maxAttempts?: number;
  readonly attempt?: number;
  readonly retryOf?: string | null;
  readonly waiting?: boolean;
  readonly key?: string | null;
}

/** A history under construction. The clock moves 1 s per event unless told otherwise. */
export class History {
  readonly entries: HistoryEntry[] = [];
  private readonly jobs = new Map<string, JobInfo>();
  private counter = 0;
  nowMs: number;

  constructor(
    readonly prefix = 'h',
    startMs = T0,
  ) {
    this.nowMs = startMs;
  }

  advance(ms: number): this {
    this.nowMs += ms;
    return this;
  }

  private nextTime(): string {
    this.nowMs += 1000;
    return new Date(this.nowMs).toISOString();
  }

  private info(jobId: string): JobInfo {
    const info = this.jobs.get(jobId);
    if (!info) throw new Error(`history: unknown job ${jobId}`);
    return info;
  }

  subjectOf(jobId: string): string {
    return `docket.evt.job.${this.info(jobId).queue}.${jobId}`;
  }

  /** Appends any event of a known job, legal or not. */
  event<T extends JobEventType>(jobId: string, type: T, data: Extract<JobEvent, { type: T }>['data'], headers: EntryHeaders = {}, time?: string): Extract<JobEvent, { type: T }> {
    const info = this.info(jobId);
    this.counter += 1;
    const event = {
      v: 1,
      id: `${this.prefix}-e${this.counter}`,
      type,
      time: time ?? this.nextTime(),
      queue: info.queue,
      data,
      meta: { node: 'test-node' },
    } as Extract<JobEvent, { type: T }>;
    this.entries.push({ subject: `docket.evt.job.${info.queue}.${jobId}`, event, headers });
    return event;
  }

  /** Appends raw bytes (or any envelope) on a subject. */
  raw(subject: string, event: Envelope | Uint8Array, headers: EntryHeaders = {}): this {
    this.entries.push({ subject, event, headers });
    return this;
  }

  submit(queue: string, jobId: string, options: SubmitOptions = {}, headers: EntryHeaders = {}): string {
    const time = this.nextTime();
    const runAtMs = Date.parse(time) + (options.delayMs ?? 0);
    this.jobs.set(jobId, { queue, attempt: options.attempt ?? 1, maxAttempts: options.maxAttempts ?? 3, runId: null, runs: 0, runAtMs });
    this.event(
      jobId,
      'job.submitted',
      {
        job_id: jobId,
        key: options.key ?? null,
        params: { n: this.counter },
        priority: options.priority ?? 5,
        position: options.position ?? null,
        run_at: new Date(runAtMs).toISOString(),
        max_attempts: options.maxAttempts ?? 3,
        backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 },
        attempt: options.attempt ?? 1,
        retry_of: options.retryOf ?? null,
        waiting: options.waiting ?? false,
      },
      headers,
      time,
    );
    return jobId;
  }

  /** Claims the job; the clock first moves to its run_at when that is later. */
  claim(jobId: string, options: { runId?: string; worker?: string; time?: string } = {}, headers: EntryHeaders = {}): string {
    const info = this.info(jobId);
    if (options.time === undefined && this.nowMs + 1000 < info.runAtMs) this.nowMs = info.runAtMs;
    info.runs += 1;
    const runId = options.runId ?? `${jobId}-run${info.runs}`;
    info.runId = runId;
    this.event(jobId, 'job.claimed', { run_id: runId, worker: options.worker ?? 'w1', host: 'host-a', pid: 4242, version: '1.0.0', lease_ms: 30_000 }, headers, options.time);
    return runId;
  }

  succeed(jobId: string, options: { runId?: string } = {}, headers: EntryHeaders = {}): this {
    this.event(jobId, 'job.succeeded', { run_id: options.runId ?? this.info(jobId).runId ?? 'none', result: { ok: true } }, headers);
    return this;
  }

  fail(jobId: string, options: { runId?: string; reason?: 'error' | 'lease_expired' | 'crash_recovery'; retryable?: boolean } = {}, headers: EntryHeaders = {}): this {
    this.event(
      jobId,
      'job.failed',
      {
        run_id: options.runId ?? this.info(jobId).runId ?? 'none',
        reason: options.reason ?? 'error',
        error: options.reason === undefined || options.reason === 'error' ? { message: 'boom', ...(options.retryable === undefined ? {} : { retryable: options.retryable }) } : null,
      },
      headers,
    );
    return this;
  }

  artifact(jobId: string, name = 'out.txt'): this {
    this.event(jobId, 'job.artifact_added', { run_id: this.info(jobId).runId ?? 'none', artifact: { name } });
    return this;
  }

  cancel(jobId: string): this {
    this.event(jobId, 'job.cancelled', { reason: 'operator' });
    return this;
  }

  move(jobId: string, priority: number, position: number | null): this {
    this.event(jobId, 'job.moved', { priority, position });
    return this;
  }

  /** Submits the retry of a failed job: derived id, attempt + 1, run_at after `delayMs`. */
  retry(failedJobId: string, options: { delayMs?: number; id?: string; attempt?: number } = {}, headers: EntryHeaders = {}): string {
    const failed = this.info(failedJobId);
    const attempt = options.attempt ?? failed.attempt + 1;
    // As the retrier derives it: from the failed job and its attempt.
    const id = options.id ?? retryJobId(failedJobId, failed.attempt);
    return this.submit(failed.queue, id, { attempt, maxAttempts: failed.maxAttempts, retryOf: failedJobId, delayMs: options.delayMs ?? 2000 }, headers);
  }

  /** A whole job that succeeds: submit, claim, artifact, succeed. */
  succeeding(queue: string, jobId: string, options: SubmitOptions = {}): string {
    this.submit(queue, jobId, options);
    this.claim(jobId);
    this.artifact(jobId);
    this.succeed(jobId);
    return jobId;
  }

  /** A job that fails `failures` times and then succeeds on a retry (or ends failed when attempts run out). */
  retrying(queue: string, jobId: string, failures: number, maxAttempts = 3): string[] {
    const ids = [this.submit(queue, jobId, { maxAttempts })];
    for (let i = 0; i < failures && i < maxAttempts; i++) {
      const current = ids[ids.length - 1]!;
      this.claim(current);
      this.fail(current);
      if (i + 1 < maxAttempts) ids.push(this.retry(current));
    }
    const last = ids[ids.length - 1]!;
    if (failures < maxAttempts) {
      this.claim(last);
      this.succeed(last);
    }
    return ids;
  }
}

const encoder = new TextEncoder();

function bytesOf(entry: HistoryEntry): Uint8Array {
  return entry.event instanceof Uint8Array ? entry.event : encoder.encode(JSON.stringify(entry.event));
}

function idOf(entry: HistoryEntry): string | null {
  if (entry.headers.msgId !== undefined) return entry.headers.msgId;
  return entry.event instanceof Uint8Array ? null : entry.event.id;
}

/** The messages DOCKET would hold after these appends, from `firstSeq` on, stored 1 ms apart from `T0`. */
export function toRecorded(entries: readonly HistoryEntry[], firstSeq = 1): RecordedMessage[] {
  const last = new Map<string, number>();
  return entries.map((entry, i) => {
    const seq = firstSeq + i;
    const right = last.get(entry.subject) ?? 0;
    last.set(entry.subject, seq);
    const expected = entry.headers.expected === undefined ? right : entry.headers.expected;
    return { seq, subject: entry.subject, time: T0 + i, msgId: idOf(entry), expectedLastSubjectSeq: expected, data: bytesOf(entry) };
  });
}

/**
 * Appends the entries to DOCKET in order with docket's headers (`Nats-Msg-Id`, and
 * `Nats-Expected-Last-Subject-Sequence` from the subject's real last sequence), or the overrides
 * an entry carries. Returns each entry's stream sequence. Throws when the server refuses one.
 */
export async function publishHistory(nc: NatsConnection, entries: readonly HistoryEntry[]): Promise<number[]> {
  const js = jetstream(nc);
  const last = new Map<string, number>();
  const seqs: number[] = [];
  for (const entry of entries) {
    const h = natsHeaders();
    const msgId = idOf(entry);
    if (msgId !== null) h.set('Nats-Msg-Id', msgId);
    const expected = entry.headers.expected === undefined ? (last.get(entry.subject) ?? (await lastOnSubject(nc, entry.subject))) : entry.headers.expected;
    if (expected !== null) h.set('Nats-Expected-Last-Subject-Sequence', String(expected));
    const ack: PubAck = await js.publish(entry.subject, bytesOf(entry), { headers: h });
    if (ack.duplicate) throw new Error(`publishHistory: ${entry.subject} was a duplicate`);
    last.set(entry.subject, ack.seq);
    seqs.push(ack.seq);
  }
  return seqs;
}

async function lastOnSubject(nc: NatsConnection, subject: string): Promise<number> {
  const { jetstreamManager } = await import('@nats-io/jetstream');
  const jsm = await jetstreamManager(nc);
  try {
    const m = await jsm.streams.getMessage('DOCKET', { last_by_subj: subject });
    return m?.seq ?? 0;
  } catch {
    return 0;
  }
}

/** A short unique queue name for one test. */
export function uniqueQueue(label: string): string {
  return `${label.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 40)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** One step of a generated legal history: what to do, which job to do it to, how long to wait first. */
export interface Step {
  readonly op: 'submit' | 'delayed' | 'claim' | 'succeed' | 'fail' | 'retry' | 'cancel' | 'move' | 'artifact';
  /** Picks the job (modulo the candidates) and, for submits, the queue and priority. */
  readonly pick: number;
  readonly gapMs: number;
}

export const STEP_OPS: readonly Step['op'][] = ['submit', 'delayed', 'claim', 'succeed', 'fail', 'retry', 'cancel', 'move', 'artifact'];

/**
 * Plays steps as a legal history: each op applies to a job it is legal for (a step with no such
 * job is skipped), claims wait for run_at, retries follow failures with attempts left.
 * Returns the status of every job, as the model sees it.
 */
export function playSteps(h: History, steps: Iterable<Step>, queues: readonly string[] = ['qa', 'qb']): Map<string, string> {
  const status = new Map<string, string>();
  const attempts = new Map<string, { attempt: number; max: number; retried: boolean }>();
  const byStatus = (...wanted: string[]): string[] => [...status].filter(([, s]) => wanted.includes(s)).map(([id]) => id);
  let n = 0;
  for (const step of steps) {
    h.advance(step.gapMs);
    const pickFrom = (ids: string[]): string | undefined => (ids.length === 0 ? undefined : ids[step.pick % ids.length]);
    switch (step.op) {
      case 'submit':
      case 'delayed': {
        n += 1;
        const id = `${h.prefix}-j${n}`;
        const max = 1 + (step.pick % 3);
        h.submit(queues[step.pick % queues.length]!, id, { priority: step.pick % 7, maxAttempts: max, delayMs: step.op === 'delayed' ? 1000 + (step.pick % 50) * 1000 : 0 });
        status.set(id, 'queued');
        attempts.set(id, { attempt: 1, max, retried: false });
        break;
      }
      case 'claim': {
        const id = pickFrom(byStatus('queued'));
        if (id === undefined) break;
        h.claim(id);
        status.set(id, 'running');
        break;
      }
      case 'succeed':
      case 'fail': {
        const id = pickFrom(byStatus('running'));
        if (id === undefined) break;
        if (step.op === 'succeed') h.succeed(id);
        else h.fail(id, { reason: step.pick % 2 === 0 ? 'error' : 'lease_expired' });
        status.set(id, step.op === 'succeed' ? 'succeeded' : 'failed');
        break;
      }
      case 'retry': {
        const id = pickFrom(byStatus('failed').filter((j) => !attempts.get(j)!.retried && attempts.get(j)!.attempt < attempts.get(j)!.max));
        if (id === undefined) break;
        const a = attempts.get(id)!;
        a.retried = true;
        const retryId = h.retry(id, { delayMs: (step.pick % 4) * 1000 });
        status.set(retryId, 'queued');
        attempts.set(retryId, { attempt: a.attempt + 1, max: a.max, retried: false });
        break;
      }
      case 'cancel': {
        const id = pickFrom(byStatus('queued', 'running'));
        if (id === undefined) break;
        h.cancel(id);
        status.set(id, 'cancelled');
        break;
      }
      case 'move': {
        const id = pickFrom(byStatus('queued'));
        if (id === undefined) break;
        h.move(id, step.pick % 5, step.pick % 3 === 0 ? null : step.pick);
        break;
      }
      case 'artifact': {
        const id = pickFrom(byStatus('running', 'succeeded', 'failed'));
        if (id === undefined) break;
        // Artifacts of a closed run are legal only for a job that ran.
        h.artifact(id);
        break;
      }
    }
  }
  return status;
}
