/**
 * What a `waiting` job waited on, for `explain` (issue 15): the member before it in a sequential
 * group, or its dependencies, with where and when each of those ended, and where and when the job
 * was released (or skipped, or cancelled instead). These jobs live in other queues than the one
 * explained, so the whole log is fed in stream order; `mentions` lets the caller skip, by their
 * bytes, the commits that cannot matter (most of them) without decoding them. A dependency's or
 * a member's retry chain is followed as the releaser and the group coordinator follow it: the
 * chain's last attempt decides.
 * Pure: messages in, view out.
 */
import { isLiveStatus, type GroupCreatedData, type JobStatus } from '../../machines/index.js';
import { decodeStoredCommit } from './decode.js';
import { jobTimeline, type JobTimeline } from './replay.js';
import type { RecordedMessage } from './types.js';

/** Where and when something happened: the event's commit sequence, its index there and its time. */
export interface LogPoint {
  readonly seq: number;
  readonly index: number;
  readonly time: string;
}

/** A job the explained job waited on, and how it ended (`ended` null: not yet). */
export interface WaitedJob {
  readonly job_id: string;
  readonly queue: string | null;
  /** Its status now (of its retry chain's last attempt); `unknown` when the log holds none of its events. */
  readonly status: string;
  /** The attempt that decided (a retry of the job, the chain's last), when it is not the job itself. */
  readonly decided_by: string | null;
  /** The event that ended it (its type, e.g. `job.succeeded`), where and when. */
  readonly ended: (LogPoint & { readonly type: string }) | null;
}

export interface GroupWait {
  readonly group_id: string;
  readonly name: string | null;
  readonly mode: string;
  readonly on_failure: string;
  /** The job's place in the group (0-based) and the group's size. */
  readonly member: number;
  readonly members: number;
  /** The member before it, which held it (sequential groups, not the first member); else null. */
  readonly previous: WaitedJob | null;
}

export interface Waits {
  /** The group the job is a member of; null when none. */
  readonly group: GroupWait | null;
  /** Each job named in depends_on, in its order. */
  readonly dependencies: readonly WaitedJob[];
  /** The job's accepted job.released; null when it was never released. */
  readonly released: LogPoint | null;
  /** What ended the wait otherwise: the job's job.skipped or job.cancelled while waiting, with its reason. */
  readonly instead: (LogPoint & { readonly type: string; readonly reason: string | null }) | null;
}

/** Whether the job was submitted `waiting` (a group member after the first, or a job with depends_on). */
export function submittedWaiting(job: JobTimeline): boolean {
  const submitted = job.events.find((e) => e.accepted && e.type === 'job.submitted');
  return (submitted?.data as { waiting?: boolean } | null | undefined)?.waiting === true;
}

const RETRY_NEEDLE = Buffer.from('"retry_of":"');

/**
 * Feed every commit of the log in stream order with `push` (those `mentions` says no to may be
 * skipped), then `waits()`. `retryIdOf` derives a failed job's retry id, as the retrier does.
 */
export class WaitCollector {
  /** Jobs whose commits are kept: the dependencies, the member before, the retries of either. */
  private readonly watched = new Set<string>();
  private readonly commits = new Map<string, RecordedMessage[]>();
  /** The explained job's id (a group.created naming it) and each watched job's. */
  private readonly needles: Buffer[];
  private group: { id: string; data: GroupCreatedData; index: number } | null = null;

  constructor(
    private readonly job: JobTimeline,
    private readonly retryIdOf: (failedJobId: string, failedAttempt: number) => string,
  ) {
    this.needles = [Buffer.from(job.job_id)];
    for (const id of job.state.job.context.depends_on ?? []) this.watch(id);
  }

  private watch(jobId: string): void {
    if (this.watched.has(jobId)) return;
    this.watched.add(jobId);
    this.needles.push(Buffer.from(jobId));
  }

  /** Whether a commit with these bytes may matter (a group's creation naming the job, a watched job, a retry). */
  mentions(bytes: Buffer): boolean {
    return bytes.includes(RETRY_NEEDLE) || this.needles.some((needle) => bytes.includes(needle));
  }

  push(message: RecordedMessage): void {
    const decoded = decodeStoredCommit(message);
    if (!decoded.ok) return;
    const keep = new Set<string>();
    for (const d of decoded.events) {
      if (d.kind === 'other' && this.group === null && d.event.type === 'group.created') {
        const data = d.event.data as GroupCreatedData;
        const index = data.members.findIndex((m) => m.job_id === this.job.job_id);
        if (index < 0) continue;
        this.group = { id: d.aggregateId, data, index };
        if (data.mode === 'sequential' && index > 0) this.watch(data.members[index - 1]!.job_id);
      }
      if (d.kind !== 'job') continue;
      // A retry of a watched job: the chain goes on there.
      if (d.event.type === 'job.submitted' && d.event.data.retry_of !== null && this.watched.has(d.event.data.retry_of)) this.watch(d.jobId);
      if (this.watched.has(d.jobId)) keep.add(d.jobId);
    }
    for (const id of keep) {
      let list = this.commits.get(id);
      if (!list) this.commits.set(id, (list = []));
      list.push(message);
    }
  }

  waits(): Waits {
    const events = this.job.events.filter((e) => e.accepted && e.index !== null);
    const point = (e: (typeof events)[number]): LogPoint => ({ seq: e.seq, index: e.index!, time: e.time });
    const released = events.find((e) => e.type === 'job.released');
    const instead = events.find((e) => e.before.job === 'waiting' && (e.type === 'job.skipped' || e.type === 'job.cancelled'));
    const g = this.group;
    return {
      group:
        g === null
          ? null
          : {
              group_id: g.id,
              name: g.data.name,
              mode: g.data.mode,
              on_failure: g.data.on_failure,
              member: g.index,
              members: g.data.members.length,
              previous: g.data.mode === 'sequential' && g.index > 0 ? this.waited(g.data.members[g.index - 1]!.job_id) : null,
            },
      dependencies: (this.job.state.job.context.depends_on ?? []).map((id) => this.waited(id)),
      released: released ? point(released) : null,
      instead: instead ? { ...point(instead), type: instead.type, reason: (instead.data as { reason?: string | null } | null)?.reason ?? null } : null,
    };
  }

  /** How a watched job ended: its retry chain's last attempt decides (for a dependency and a group member alike). */
  private waited(jobId: string): WaitedJob {
    let timeline = jobTimeline(this.commits.get(jobId) ?? [], jobId);
    if (timeline === null) return { job_id: jobId, queue: null, status: 'unknown', decided_by: null, ended: null };
    for (let hops = 0; timeline.status === 'failed' && hops < 1000; hops++) {
      const retryId = this.retryIdOf(timeline.job_id, timeline.attempt);
      const retry = jobTimeline(this.commits.get(retryId) ?? [], retryId);
      if (retry === null || retry.retry_of !== timeline.job_id) break;
      timeline = retry;
    }
    const end = timeline.events.find((e) => e.accepted && e.index !== null && e.after.job !== 'new' && !isLiveStatus(e.after.job as JobStatus));
    return {
      job_id: jobId,
      queue: timeline.queue,
      status: timeline.status,
      decided_by: timeline.job_id === jobId ? null : timeline.job_id,
      ended: end ? { seq: end.seq, index: end.index!, time: end.time, type: end.type } : null,
    };
  }
}

/** The notes explain prints for these waits: which group member or dependency held the job, and until when. */
export function waitNotes(waits: Waits): string[] {
  const notes: string[] = [];
  const at = (p: LogPoint) => `${p.time} (${p.seq}:${p.index})`;
  const ended = (w: WaitedJob) =>
    `${w.job_id}${w.decided_by === null ? '' : ` (its retry ${w.decided_by})`} ${w.ended === null ? `had not ended (${w.status})` : `ended ${w.ended.type.slice('job.'.length)} at ${at(w.ended)}`}`;
  const outcome = waits.released
    ? `released at ${at(waits.released)}`
    : waits.instead
      ? `${waits.instead.type.slice('job.'.length)} while waiting at ${at(waits.instead)}${waits.instead.reason === null ? '' : ` (${waits.instead.reason})`}`
      : 'not released yet';
  const g = waits.group;
  if (g !== null) {
    const name = `${g.mode} group ${g.group_id}${g.name === null ? '' : ` (${g.name})`}`;
    if (g.previous === null) notes.push(`member ${g.member + 1} of ${g.members} of ${name}: ${g.mode === 'sequential' ? 'the first member, never held by the group' : 'never held by the group'}`);
    else notes.push(`member ${g.member + 1} of ${g.members} of ${name}, on_failure ${g.on_failure}: held until member ${g.member} ${ended(g.previous)}; ${outcome}`);
  }
  if (waits.dependencies.length > 0) {
    notes.push(`waited on its dependencies: ${waits.dependencies.map(ended).join('; ')}; ${outcome}`);
  }
  return notes;
}
