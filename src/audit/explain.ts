/**
 * `explain`: why a job ran when it did. Folds its queue's commits into the node's projections
 * and, just before the job's accepted `job.claimed`, reads the queue order with the clock at the
 * claim's time (the dispatcher's decision): the job's order key, the ready jobs that stood ahead
 * of it, and then, folding on, what became of each of those. Pure: messages in, explanation out.
 */
import { commitSeqOf, evolveJob, indexOf, positionOf, type JobClaimedData, type JobEvent, type Position } from '../../machines/index.js';
import type { OrderKey } from '../projections/queue-order.js';
import { FlowGate, type HoldReason } from '../dispatch/flow-gate.js';
import { decodeStoredCommit } from './decode.js';
import { QueueReplay, type ChainLink, type JobReplay } from './replay.js';
import type { RecordedMessage } from './types.js';
import { waitNotes, type Waits } from './waits.js';

/** An order key as explain shows it: the submit's position split into its commit sequence and index. */
export interface OrderKeyView {
  readonly priority: number;
  /** The moved-to position, else the job.submitted event's position (one number). */
  readonly position: number;
  readonly seq: number;
  readonly index: number;
}

function keyView(key: OrderKey): OrderKeyView {
  return { priority: key.priority, position: key.position, seq: commitSeqOf(key.seq), index: indexOf(key.seq) };
}

export interface AheadJob extends OrderKeyView {
  readonly job_id: string;
  /** What became of it after the claim: `claimed`, `cancelled`, ... or `queued` when nothing yet. */
  readonly fate: string;
  /** Where that happened: commit sequence and index. */
  readonly fate_seq: number | null;
  readonly fate_index: number | null;
  /** The worker whose claim took it, when it was claimed. */
  readonly fate_worker: string | null;
}

/** The claim that won: its job.claimed data, where it stands in the log (commit sequence, index) and when. */
export interface ClaimView extends JobClaimedData {
  readonly seq: number;
  readonly index: number;
  readonly time: string;
}

export interface Explanation {
  readonly job_id: string;
  readonly queue: string;
  readonly status: string;
  /** The claim that won (the job's run); null when the job was never claimed. */
  readonly claim: ClaimView | null;
  /** The order key (priority, position, submit position) at the claim, or now when never claimed. */
  readonly order_key: OrderKeyView | null;
  /** 0-based place in the ready order at the claim (now when never claimed); null when not ready. */
  readonly place: number | null;
  readonly ready_count: number;
  /** Ready jobs ahead of it then; normally only jobs whose own claims were in flight. */
  readonly ahead: readonly AheadJob[];
  readonly delays: {
    readonly created_at: string;
    readonly run_at: string;
    /** run_at - created_at, when positive. */
    readonly requested_delay_ms: number;
    /** When the job became claimable: the later of created_at and run_at. */
    readonly ready_at: string;
    /** From ready_at to the claim; null when never claimed. */
    readonly waited_ms: number | null;
  };
  readonly retries: readonly ChainLink[];
  /**
   * What flow control held the job back with while it was ready and unclaimed (a pause, a
   * reservation, the queue's concurrency or rate, its key's limits): each reason with the first
   * and last event time it held at, as the log shows them.
   */
  readonly holds: readonly HeldView[];
  /**
   * For a job submitted `waiting`: the group member before it or the dependencies that held it,
   * when each of them ended, and when it was released (./waits.ts); null when not given.
   */
  readonly waits: Waits | null;
  readonly notes: readonly string[];
}

export interface HeldView {
  readonly reason: HoldReason;
  readonly detail: string;
  readonly from: string;
  readonly to: string;
}

interface Captured {
  readonly claim: ClaimView;
  readonly key: OrderKeyView | null;
  readonly place: number | null;
  readonly readyCount: number;
  readonly ahead: { job_id: string; key: OrderKeyView }[];
}

/**
 * Feed the job's queue commits in stream order with `push`; `done` turns true once the claim is
 * seen and every job ahead of it has a fate (the caller may stop reading); then `explanation()`.
 */
export class Explainer {
  private readonly replay: QueueReplay;
  private captured: Captured | null = null;
  private readonly fates = new Map<string, { fate: string; at: Position; worker: string | null }>();
  private readonly holds = new Map<HoldReason, { detail: string; from: string; to: string }>();
  private pendingFates = 0;

  constructor(
    private readonly job: JobReplay,
    /** The clock for "now" when the job was never claimed (ms). */
    private readonly nowMs: number,
  ) {
    this.replay = new QueueReplay(job.job.queue, nowMs);
  }

  get done(): boolean {
    return this.captured !== null && this.pendingFates === 0;
  }

  push(message: RecordedMessage): void {
    if (!this.replay.holds(message) || message.seq <= this.replay.seq) return;
    const decoded = decodeStoredCommit(message);
    if (!decoded.ok) {
      this.replay.pushDecoded(message, decoded);
      return;
    }
    const queue = this.job.job.queue;
    const events = decoded.events;
    for (let i = 0; i < events.length; i++) {
      const d = events[i]!;
      const position = positionOf(message.seq, i);
      if (this.captured === null && d.kind !== 'undecodable') this.noteHold(d.event.time);
      if (d.kind === 'job' && d.queue === queue) {
        const event = d.event;
        if (this.captured === null && d.jobId === this.job.job.job_id && event.type === 'job.claimed') {
          const record = this.replay.store.get(d.jobId);
          if (record && evolveJob(record.state, event) !== null) this.capture(position, event);
        } else if (this.captured !== null && this.pendingFates > 0 && !this.fates.has(d.jobId)) {
          this.noteFate(position, d.jobId, event);
        }
      }
      this.replay.pushEvent(position, d);
    }
  }

  /** While the job is ready and unclaimed: what flow control holds it back with at `time`. */
  private noteHold(time: string): void {
    const record = this.replay.store.get(this.job.job.job_id);
    const at = Date.parse(time);
    if (!record || record.state.job.value !== 'queued' || Date.parse(record.state.job.context.run_at) > at) return;
    const gate = new FlowGate(record.queue, this.replay.aggregates, this.replay.counts);
    const hold = gate.queueHold(at) ?? gate.keyHold(record.state.job.context.concurrency_key, at);
    if (hold === null) return;
    const seen = this.holds.get(hold.reason);
    this.holds.set(hold.reason, seen === undefined ? { detail: hold.detail, from: time, to: time } : { ...seen, to: time });
  }

  private capture(position: Position, event: Extract<JobEvent, { type: 'job.claimed' }>): void {
    const jobId = this.job.job.job_id;
    this.replay.atMs = Date.parse(event.time);
    const view = this.replay.view();
    const place = view.ready.findIndex((r) => r.job_id === jobId);
    const ahead = (place < 0 ? [] : view.ready.slice(0, place)).map((r) => ({
      job_id: r.job_id,
      key: { priority: r.priority, position: r.position, seq: r.seq, index: r.index },
    }));
    const key = this.replay.orderKey(jobId);
    this.captured = {
      claim: { seq: commitSeqOf(position), index: indexOf(position), time: event.time, ...event.data },
      key: key === null ? null : keyView(key),
      place: place < 0 ? null : place,
      readyCount: view.ready.length,
      ahead,
    };
    this.pendingFates = ahead.length;
    this.replay.atMs = this.nowMs;
  }

  private noteFate(position: Position, jobId: string, event: JobEvent): void {
    if (!this.captured!.ahead.some((a) => a.job_id === jobId)) return;
    const record = this.replay.store.get(jobId);
    if (!record || evolveJob(record.state, event) === null) return;
    if (event.type === 'job.moved' || event.type === 'job.artifact_added') return;
    const fate = event.type.slice('job.'.length);
    this.fates.set(jobId, { fate, at: position, worker: event.type === 'job.claimed' ? event.data.worker : null });
    this.pendingFates -= 1;
  }

  /** `waits`: what held a job submitted waiting, read from the whole log (WaitCollector). */
  explanation(waits: Waits | null = null): Explanation {
    const t = this.job.job;
    const createdMs = Date.parse(t.created_at);
    const runAtMs = Date.parse(t.run_at);
    const readyAtMs = Math.max(createdMs, runAtMs);
    const notes: string[] = [];
    let claim: ClaimView | null = null;
    let key: OrderKeyView | null;
    let place: number | null;
    let readyCount: number;
    let ahead: AheadJob[];
    if (this.captured) {
      ({ claim, key, place, readyCount } = this.captured);
      ahead = this.captured.ahead.map((a) => {
        const f = this.fates.get(a.job_id);
        return {
          job_id: a.job_id,
          ...a.key,
          fate: f?.fate ?? 'queued',
          fate_seq: f === undefined ? null : commitSeqOf(f.at),
          fate_index: f === undefined ? null : indexOf(f.at),
          fate_worker: f?.worker ?? null,
        };
      });
      if (place === null) notes.push('the job was not in the ready order when its claim was decided (a delayed or moved job, or a tampered log)');
      else if (ahead.length > 0) notes.push(`${ahead.length} ready job(s) stood ahead at the claim; claims of the head are decided concurrently, so these are normally claims in flight`);
    } else {
      const view = this.replay.view();
      const idx = view.ready.findIndex((r) => r.job_id === t.job_id);
      const now = this.replay.orderKey(t.job_id);
      key = now === null ? null : keyView(now);
      place = idx < 0 ? null : idx;
      readyCount = view.ready.length;
      ahead = (idx < 0 ? [] : view.ready.slice(0, idx)).map((r) => ({
        job_id: r.job_id,
        priority: r.priority,
        position: r.position,
        seq: r.seq,
        index: r.index,
        fate: 'queued',
        fate_seq: null,
        fate_index: null,
        fate_worker: null,
      }));
      notes.push(`never claimed: the job is ${t.status}${idx >= 0 ? `, place ${idx} of ${view.ready.length} in the ready order now` : ''}`);
      if (t.status === 'queued' && runAtMs > this.nowMs) notes.push(`delayed until ${t.run_at}`);
    }
    const holds = [...this.holds].map(([reason, h]) => ({ reason, ...h }));
    for (const h of holds) notes.push(`held by ${h.reason} (${h.detail}) from ${h.from} to ${h.to}`);
    if (waits !== null) notes.push(...waitNotes(waits));
    if (t.retry_of !== null) notes.push(`attempt ${t.attempt} of ${t.max_attempts}: a retry of ${t.retry_of}`);
    // Where it came from: the schedule fire and the template revision job.submitted records.
    const origin = t.events.find((e) => e.type === 'job.submitted')?.data as { schedule?: { name: string; tick: string; trigger: string }; template?: { name: string; revision: number } } | null | undefined;
    if (origin?.schedule) notes.push(`made by schedule ${origin.schedule.name}: its ${origin.schedule.trigger} fire of tick ${origin.schedule.tick}`);
    if (origin?.template) notes.push(`made from template ${origin.template.name}, revision ${origin.template.revision}`);
    const removal = t.status === 'removed' ? t.events.find((e) => e.accepted && e.type === 'job.removed') : undefined;
    if (removal) {
      const reason = (removal.data as { reason?: unknown } | null)?.reason;
      notes.push(`removed (${String(reason)}) at ${removal.time}: gone from progress, list and the queue order; the log keeps its history`);
    }
    const claimMs = claim ? Date.parse(claim.time) : NaN;
    return {
      job_id: t.job_id,
      queue: t.queue,
      status: t.status,
      claim,
      order_key: key,
      place,
      ready_count: readyCount,
      ahead,
      delays: {
        created_at: t.created_at,
        run_at: t.run_at,
        requested_delay_ms: Math.max(0, runAtMs - createdMs),
        ready_at: new Date(readyAtMs).toISOString(),
        waited_ms: Number.isFinite(claimMs) ? claimMs - readyAtMs : null,
      },
      retries: this.job.chain,
      holds,
      waits,
      notes,
    };
  }
}
