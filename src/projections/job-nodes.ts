/**
 * Fan-out jobs' nodes (kind `jobnode`) as every node folds them: the nodes of each job, and the
 * queued ones per (queue, worker node) in the order they became queued, for the dispatcher. Also
 * the worker nodes the leader has seen claim or heartbeat on each queue (not in the log: a
 * fan-out submit without `nodes` records the set it chose from them on its job.submitted).
 */
import type { FoldState, JobNodeContext } from '../../machines/index.js';
import type { AggregateChange, AggregateStore } from '../store/aggregate-store.js';

/** A worker node counts as live on a queue this long after its last claim or heartbeat there. */
export const NODE_SEEN_WINDOW_MS = 30_000;

export interface JobNodeEntry {
  readonly id: string;
  readonly queue: string;
  readonly state: FoldState<JobNodeContext>;
}

export class JobNodeIndex {
  /** Job id -> its job nodes' ids, in creation order. */
  private readonly byJob = new Map<string, string[]>();
  /** Queue -> worker node -> queued job node ids (insertion order: oldest first). */
  private readonly queued = new Map<string, Map<string, Set<string>>>();
  /** Queue -> worker node -> when (ms) one of its workers last claimed or heartbeat there. */
  private readonly seen = new Map<string, Map<string, number>>();

  constructor(private readonly aggregates: AggregateStore) {}

  readonly apply = ({ before, after }: AggregateChange): void => {
    if (after.kind !== 'jobnode' || after.queue === null) return;
    const state = after.state as FoldState<JobNodeContext>;
    const { job_id: jobId, node } = state.context;
    if (before === undefined) {
      const ids = this.byJob.get(jobId);
      if (ids === undefined) this.byJob.set(jobId, [after.id]);
      else if (!ids.includes(after.id)) ids.push(after.id);
    }
    let byNode = this.queued.get(after.queue);
    if (state.value === 'queued') {
      if (byNode === undefined) this.queued.set(after.queue, (byNode = new Map()));
      let ids = byNode.get(node);
      if (ids === undefined) byNode.set(node, (ids = new Set()));
      ids.add(after.id);
    } else {
      byNode?.get(node)?.delete(after.id);
    }
  };

  /** The job's nodes (empty for an ordinary job). */
  nodesOf(jobId: string): JobNodeEntry[] {
    const ids = this.byJob.get(jobId);
    if (ids === undefined) return [];
    const entries: JobNodeEntry[] = [];
    for (const id of ids) {
      const record = this.aggregates.get<JobNodeContext>('jobnode', id);
      if (record !== undefined && record.queue !== null) entries.push({ id, queue: record.queue, state: record.state });
    }
    return entries;
  }

  isFanOut(jobId: string): boolean {
    return this.byJob.size > 0 && this.byJob.has(jobId);
  }

  /** Fan-out jobs with nodes in `queue`. */
  jobsOf(queue: string): string[] {
    const jobs: string[] = [];
    for (const [jobId, ids] of this.byJob) if (this.aggregates.get('jobnode', ids[0]!)?.queue === queue) jobs.push(jobId);
    return jobs;
  }

  /** Whether any job node of the queue is queued (the dispatcher's cheap test). */
  hasQueued(queue: string): boolean {
    const byNode = this.queued.get(queue);
    if (byNode === undefined) return false;
    for (const ids of byNode.values()) if (ids.size > 0) return true;
    return false;
  }

  /** The queued job nodes of a worker node, oldest first. */
  queuedFor(queue: string, node: string): readonly string[] {
    const ids = this.queued.get(queue)?.get(node);
    return ids === undefined ? [] : [...ids];
  }

  /** A worker of `node` claimed or heartbeat on `queue` at `nowMs`. */
  sawNode(queue: string, node: string, nowMs: number): void {
    let byNode = this.seen.get(queue);
    if (byNode === undefined) this.seen.set(queue, (byNode = new Map()));
    byNode.set(node, nowMs);
  }

  /** The worker nodes seen on `queue` within NODE_SEEN_WINDOW_MS of `nowMs`, sorted by name. */
  liveNodes(queue: string, nowMs: number): string[] {
    const byNode = this.seen.get(queue);
    if (byNode === undefined) return [];
    return [...byNode].filter(([, at]) => nowMs - at <= NODE_SEEN_WINDOW_MS).map(([node]) => node).sort();
  }
}
