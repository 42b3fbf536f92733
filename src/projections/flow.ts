/**
 * Flow counts: per queue, how many jobs run (in all and per concurrency_key) and when the recent
 * claims were made, folded from the job store on every node, so a new leader enforces the limits
 * from warm counts. Claim times are the `job.claimed` events' own times, so the counts are a
 * function of the log; only as many are kept as the queue's rate limits can look at.
 */
import type { QueueSettings } from '../../machines/index.js';
import type { JobChange, JobRecord } from '../store/job-store.js';

/** The claim times of a window, oldest first, at most `keep` of them. */
class ClaimTimes {
  readonly times: number[] = [];

  add(timeMs: number, keep: number): void {
    // Claims arrive in log order, and their times almost always do too: insert from the end.
    let i = this.times.length;
    while (i > 0 && this.times[i - 1]! > timeMs) i -= 1;
    this.times.splice(i, 0, timeMs);
    if (this.times.length > keep) this.times.splice(0, this.times.length - keep);
  }

  /** Claims at or after `sinceMs`. */
  countSince(sinceMs: number): number {
    let lo = 0;
    let hi = this.times.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.times[mid]! < sinceMs) lo = mid + 1;
      else hi = mid;
    }
    return this.times.length - lo;
  }

  /** The time of the `n`-th most recent claim (1 = the latest), if there are that many. */
  nthLatest(n: number): number | undefined {
    return this.times[this.times.length - n];
  }
}

interface KeyFlow {
  running: number;
  readonly claims: ClaimTimes;
}

interface QueueFlow {
  running: number;
  readonly claims: ClaimTimes;
  readonly keys: Map<string, KeyFlow>;
}

function claimTimesOf(record: JobRecord): number[] {
  return record.later.filter((h) => h.type === 'job.claimed').map((h) => Date.parse(h.time));
}

export class FlowCounts {
  private readonly queues = new Map<string, QueueFlow>();
  private readonly freedListeners: ((queue: string, key: string | null) => void)[] = [];

  constructor(private readonly settingsOf: (queue: string) => QueueSettings) {}

  /** Called when a running job of the queue ends (with its concurrency_key): a slot a limit held may be free. */
  onFreed(listener: (queue: string, key: string | null) => void): void {
    this.freedListeners.push(listener);
  }

  private flow(queue: string): QueueFlow {
    let flow = this.queues.get(queue);
    if (!flow) {
      flow = { running: 0, claims: new ClaimTimes(), keys: new Map() };
      this.queues.set(queue, flow);
    }
    return flow;
  }

  private keyFlow(flow: QueueFlow, key: string): KeyFlow {
    let keyFlow = flow.keys.get(key);
    if (!keyFlow) {
      keyFlow = { running: 0, claims: new ClaimTimes() };
      flow.keys.set(key, keyFlow);
    }
    return keyFlow;
  }

  readonly apply = (change: JobChange): void => {
    const { before, after, recorded } = change;
    const wasRunning = before?.state.job.value === 'running';
    const isRunning = after.state.job.value === 'running';
    const key = after.state.job.context.concurrency_key;
    const settings = this.settingsOf(after.queue);
    // Claims: the event's time; a record restored from a checkpoint brings its history's.
    const claimedAt = recorded === undefined ? (before === undefined ? claimTimesOf(after) : []) : recorded.event.type === 'job.claimed' ? [Date.parse(recorded.event.time)] : [];
    if (wasRunning === isRunning && claimedAt.length === 0) return;
    const flow = this.flow(after.queue);
    const keyFlow = key === null ? undefined : this.keyFlow(flow, key);
    for (const at of claimedAt) {
      if (settings.rate) flow.claims.add(at, settings.rate.limit);
      if (keyFlow && settings.key_rate) keyFlow.claims.add(at, settings.key_rate.limit);
    }
    if (isRunning && !wasRunning) {
      flow.running += 1;
      if (keyFlow) keyFlow.running += 1;
    } else if (wasRunning && !isRunning) {
      flow.running -= 1;
      if (keyFlow) {
        keyFlow.running -= 1;
        // A key with nothing running and no claim a rate could still count is forgotten.
        if (keyFlow.running === 0 && keyFlow.claims.times.length === 0) flow.keys.delete(key!);
      }
      for (const listener of this.freedListeners) listener(after.queue, key);
    }
  };

  running(queue: string): number {
    return this.queues.get(queue)?.running ?? 0;
  }

  runningOfKey(queue: string, key: string): number {
    return this.queues.get(queue)?.keys.get(key)?.running ?? 0;
  }

  /** Claims of the queue at or after `sinceMs` (counted only while the queue has a rate). */
  claimsSince(queue: string, sinceMs: number): number {
    return this.queues.get(queue)?.claims.countSince(sinceMs) ?? 0;
  }

  keyClaimsSince(queue: string, key: string, sinceMs: number): number {
    return this.queues.get(queue)?.keys.get(key)?.claims.countSince(sinceMs) ?? 0;
  }

  /** The time of the queue's n-th latest claim: when it leaves the window, a claim is free again. */
  nthLatestClaim(queue: string, n: number): number | undefined {
    return this.queues.get(queue)?.claims.nthLatest(n);
  }

  nthLatestKeyClaim(queue: string, key: string, n: number): number | undefined {
    return this.queues.get(queue)?.keys.get(key)?.claims.nthLatest(n);
  }
}
