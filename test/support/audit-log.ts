/**
 * Builds job histories for the audit and replay tests: legal lifecycles (submit, claim,
 * succeed/fail, retries as new jobs with derived ids) and hand-made tampering. A history is a
 * list of events, each in its partition; `toRecorded` packs them into commits as DOCKET would
 * hold them (one event per commit unless grouped with `together` or `eventsPerCommit`, with the
 * right expected sequence and hash chain unless an entry overrides them), and `publishHistory`
 * appends the commits to a real stream with docket's headers.
 */
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { jetstream, jetstreamManager, type PubAck } from '@nats-io/jetstream';
import type { JobEvent, JobEventType } from '../../machines/index.js';
import type { EventRef, RecordedMessage } from '../../src/audit/index.js';
import { commitHash, encodeCommit } from '../../src/nats/codec.js';
import { EXPECTED_HEADER, MSG_ID_HEADER, STREAM } from '../../src/nats/subjects.js';
import { retryJobId } from '../../src/ids.js';

export const T0 = Date.parse('2030-01-01T00:00:00.000Z');

/** What an entry's commit carries instead of the right values (an entry with any starts a commit of its own). */
export interface CommitOverrides {
  /** The expected last subject sequence to send; null sends none (an unguarded append); undefined computes the right one. */
  readonly expected?: number | null;
  /** The Nats-Msg-Id to send; null sends none; undefined sends the commit id. */
  readonly msgId?: string | null;
  /** The commit's prev_hash; undefined computes the right one. */
  readonly prevHash?: string | null;
  /** The commit's `partition` field; undefined: where it is stored. */
  readonly partition?: string;
  readonly epoch?: number;
  readonly node?: string;
  readonly commitId?: string;
}

export interface HistoryEntry {
  /** `q.<queue>` or `sys`: where its commit is stored. */
  readonly partition: string;
  /** The event (an envelope, or any value for an undecodable event). */
  readonly event?: unknown;
  /** The whole stored payload of a commit (instead of an event). */
  readonly payload?: Uint8Array;
  readonly commit: CommitOverrides;
  /** Entries of one group (consecutive, one partition) share a commit. */
  readonly group: number | null;
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
  private groups = 0;
  private group: number | null = null;
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

  /** The subject of the job's partition. */
  subjectOf(jobId: string): string {
    return `docket.log.q.${this.info(jobId).queue}`;
  }

  /** Events added inside `fn` are stored in one commit (per partition). */
  together(fn: () => void): this {
    const outer = this.group;
    this.groups += 1;
    this.group = this.groups;
    try {
      fn();
    } finally {
      this.group = outer;
    }
    return this;
  }

  private push(partition: string, event: unknown, commit: CommitOverrides): void {
    this.entries.push({ partition, event, commit, group: this.group });
  }

  /** Appends any event of a known job, legal or not. `commit` overrides what its commit carries. */
  event<T extends JobEventType>(jobId: string, type: T, data: Extract<JobEvent, { type: T }>['data'], commit: CommitOverrides = {}, time?: string): Extract<JobEvent, { type: T }> {
    const info = this.info(jobId);
    this.counter += 1;
    const event = {
      id: `${this.prefix}-e${this.counter}`,
      type,
      time: time ?? this.nextTime(),
      aggregate: { kind: 'job', id: jobId },
      queue: info.queue,
      data,
      meta: { node: 'test-node' },
    } as Extract<JobEvent, { type: T }>;
    this.push(`q.${info.queue}`, event, commit);
    return event;
  }

  /** Appends any value as an event of `partition` (an envelope of another aggregate, or something that is none). */
  raw(partition: string, event: unknown, commit: CommitOverrides = {}): this {
    this.push(partition, event, commit);
    return this;
  }

  /** Appends a commit whose whole stored payload is `payload` (an undecodable commit). */
  rawCommit(partition: string, payload: Uint8Array, commit: CommitOverrides = {}): this {
    this.entries.push({ partition, payload, commit, group: null });
    return this;
  }

  submit(queue: string, jobId: string, options: SubmitOptions = {}, commit: CommitOverrides = {}): string {
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
      commit,
      time,
    );
    return jobId;
  }

  /** Claims the job; the clock first moves to its run_at when that is later. */
  claim(jobId: string, options: { runId?: string; worker?: string; time?: string } = {}, commit: CommitOverrides = {}): string {
    const info = this.info(jobId);
    if (options.time === undefined && this.nowMs + 1000 < info.runAtMs) this.nowMs = info.runAtMs;
    info.runs += 1;
    const runId = options.runId ?? `${jobId}-run${info.runs}`;
    info.runId = runId;
    this.event(jobId, 'job.claimed', { run_id: runId, worker: options.worker ?? 'w1', host: 'host-a', pid: 4242, version: '1.0.0', lease_ms: 30_000 }, commit, options.time);
    return runId;
  }

  succeed(jobId: string, options: { runId?: string } = {}, commit: CommitOverrides = {}): this {
    this.event(jobId, 'job.succeeded', { run_id: options.runId ?? this.info(jobId).runId ?? 'none', result: { ok: true } }, commit);
    return this;
  }

  fail(jobId: string, options: { runId?: string; reason?: 'error' | 'lease_expired' | 'crash_recovery'; retryable?: boolean } = {}, commit: CommitOverrides = {}): this {
    this.event(
      jobId,
      'job.failed',
      {
        run_id: options.runId ?? this.info(jobId).runId ?? 'none',
        reason: options.reason ?? 'error',
        error: options.reason === undefined || options.reason === 'error' ? { message: 'boom', ...(options.retryable === undefined ? {} : { retryable: options.retryable }) } : null,
      },
      commit,
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

  /** The job leaves the views (`docket clean`, or a job set's removal). */
  remove(jobId: string, reason: 'cleaned' | 'stale' | 'orphan' | 'deleted' | 'completed' = 'cleaned'): this {
    this.event(jobId, 'job.removed', { reason });
    return this;
  }

  move(jobId: string, priority: number, position: number | null): this {
    this.event(jobId, 'job.moved', { priority, position });
    return this;
  }

  /** Submits the retry of a failed job: derived id, attempt + 1, run_at after `delayMs`. */
  retry(failedJobId: string, options: { delayMs?: number; id?: string; attempt?: number } = {}, commit: CommitOverrides = {}): string {
    const failed = this.info(failedJobId);
    const attempt = options.attempt ?? failed.attempt + 1;
    // As the retrier derives it: from the failed job and its attempt.
    const id = options.id ?? retryJobId(failedJobId, failed.attempt);
    return this.submit(failed.queue, id, { attempt, maxAttempts: failed.maxAttempts, retryOf: failedJobId, delayMs: options.delayMs ?? 2000 }, commit);
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

export interface PlannedCommit {
  readonly partition: string;
  readonly events: unknown[];
  readonly payload: Uint8Array | null;
  readonly overrides: CommitOverrides;
  /** The entries it holds, by index in the history. */
  readonly entries: number[];
  readonly group: number | null;
}

export interface PackOptions {
  /** Consecutive events of one partition (without overrides) per commit. @defaultValue 1 */
  readonly eventsPerCommit?: number;
}

function hasOverrides(o: CommitOverrides): boolean {
  return Object.keys(o).length > 0;
}

/** Groups entries into commits: one per entry, unless grouped (`together`) or packed (`eventsPerCommit`). */
export function planCommits(entries: readonly HistoryEntry[], options: PackOptions = {}): PlannedCommit[] {
  const cap = options.eventsPerCommit ?? 1;
  const out: PlannedCommit[] = [];
  entries.forEach((entry, i) => {
    const open = out[out.length - 1];
    if (entry.payload === undefined && open !== undefined && open.payload === null && open.partition === entry.partition) {
      const grouped = entry.group !== null && open.group === entry.group;
      const packed = entry.group === null && open.group === null && cap > 1 && open.events.length < cap && !hasOverrides(entry.commit) && !hasOverrides(open.overrides);
      if (grouped || packed) {
        open.events.push(entry.event);
        open.entries.push(i);
        if (grouped && hasOverrides(entry.commit)) Object.assign(open.overrides, entry.commit);
        return;
      }
    }
    out.push({ partition: entry.partition, events: entry.payload === undefined ? [entry.event] : [], payload: entry.payload ?? null, overrides: { ...entry.commit }, entries: [i], group: entry.group });
  });
  return out;
}

/** The payload docket would store for a planned commit. */
function payloadOf(planned: PlannedCommit, commitId: string, prevHash: string | null): Uint8Array {
  if (planned.payload !== null) return planned.payload;
  const o = planned.overrides;
  const commit = {
    commit: commitId,
    partition: o.partition ?? planned.partition,
    writer: { node: o.node ?? 'test-node', epoch: o.epoch ?? 1 },
    prev_hash: o.prevHash === undefined ? prevHash : o.prevHash,
    events: planned.events,
  };
  // As a node stores it: a submit without the fields that hold their absent values.
  return encodeCommit(commit as Parameters<typeof encodeCommit>[0]);
}

export interface RecordedLog {
  readonly messages: RecordedMessage[];
  /** Where each entry of the history is stored (index null for a raw commit). */
  readonly positions: EventRef[];
}

/** The commits DOCKET would hold after these appends, from `firstSeq` on, stored 1 ms apart from `T0`, and where each entry landed. */
export function recordLog(entries: readonly HistoryEntry[], firstSeq = 1, options: PackOptions = {}): RecordedLog {
  const last = new Map<string, { seq: number; hash: string | null }>();
  const positions: EventRef[] = new Array<EventRef>(entries.length);
  const messages = planCommits(entries, options).map((planned, i) => {
    const seq = firstSeq + i;
    const subject = `docket.log.${planned.partition}`;
    const tip = last.get(subject) ?? { seq: 0, hash: null };
    const o = planned.overrides;
    const commitId = o.commitId ?? `c${seq}`;
    const data = payloadOf(planned, commitId, tip.hash);
    last.set(subject, { seq, hash: commitHash(data) });
    planned.entries.forEach((entry, index) => (positions[entry] = { seq, index: planned.payload === null ? index : null }));
    return {
      seq,
      subject,
      time: T0 + i,
      msgId: o.msgId === undefined ? commitId : o.msgId,
      expectedLastSubjectSeq: o.expected === undefined ? tip.seq : o.expected,
      data,
    };
  });
  return { messages, positions };
}

/** The commits DOCKET would hold after these appends (see `recordLog`). */
export function toRecorded(entries: readonly HistoryEntry[], firstSeq = 1, options: PackOptions = {}): RecordedMessage[] {
  return recordLog(entries, firstSeq, options).messages;
}

/**
 * Appends the entries' commits to DOCKET in order with docket's headers (`Nats-Msg-Id` = the
 * commit id, `Nats-Expected-Last-Subject-Sequence` = the partition's real last sequence) and
 * the hash chain over what the partition really holds, or the overrides an entry carries.
 * Returns each entry's stream sequence. Throws when the server refuses one.
 */
export async function publishHistory(nc: NatsConnection, entries: readonly HistoryEntry[], options: PackOptions = {}): Promise<number[]> {
  const js = jetstream(nc);
  const last = new Map<string, { seq: number; hash: string | null }>();
  const seqs: number[] = new Array<number>(entries.length);
  const run = Math.random().toString(36).slice(2, 10);
  let n = 0;
  for (const planned of planCommits(entries, options)) {
    const subject = `docket.log.${planned.partition}`;
    const tip = last.get(subject) ?? (await tipOf(nc, subject));
    const o = planned.overrides;
    n += 1;
    const commitId = o.commitId ?? `t-${run}-c${n}`;
    const data = payloadOf(planned, commitId, tip.hash);
    const h = natsHeaders();
    const msgId = o.msgId === undefined ? commitId : o.msgId;
    if (msgId !== null) h.set(MSG_ID_HEADER, msgId);
    const expected = o.expected === undefined ? tip.seq : o.expected;
    if (expected !== null) h.set(EXPECTED_HEADER, String(expected));
    const ack: PubAck = await js.publish(subject, data, { headers: h });
    if (ack.duplicate) throw new Error(`publishHistory: a commit on ${subject} was a duplicate`);
    last.set(subject, { seq: ack.seq, hash: commitHash(data) });
    for (const entry of planned.entries) seqs[entry] = ack.seq;
  }
  return seqs;
}

/** The partition's last stored commit: its sequence and the hash of its payload. */
async function tipOf(nc: NatsConnection, subject: string): Promise<{ seq: number; hash: string | null }> {
  const jsm = await jetstreamManager(nc);
  try {
    const m = await jsm.streams.getMessage(STREAM, { last_by_subj: subject });
    return m ? { seq: m.seq, hash: commitHash(m.data) } : { seq: 0, hash: null };
  } catch {
    return { seq: 0, hash: null };
  }
}

/** A short unique queue name for one test. */
export function uniqueQueue(label: string): string {
  return `${label.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 40)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** One step of a generated legal history: what to do, which job to do it to, how long to wait first. */
export interface Step {
  readonly op: 'submit' | 'delayed' | 'claim' | 'succeed' | 'fail' | 'retry' | 'cancel' | 'move' | 'artifact' | 'remove';
  /** Picks the job (modulo the candidates) and, for submits, the queue and priority. */
  readonly pick: number;
  readonly gapMs: number;
}

export const STEP_OPS: readonly Step['op'][] = ['submit', 'delayed', 'claim', 'succeed', 'fail', 'retry', 'cancel', 'move', 'artifact', 'remove'];

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
      case 'remove': {
        // Any job not running: ended, or still queued (a job set's removal). A failed job
        // removed is never retried after (the retrier and retry_all retry failed jobs only).
        const id = pickFrom(byStatus('queued', 'succeeded', 'failed', 'cancelled'));
        if (id === undefined) break;
        h.remove(id, step.pick % 2 === 0 ? 'cleaned' : 'deleted');
        status.set(id, 'removed');
        break;
      }
    }
  }
  return status;
}
