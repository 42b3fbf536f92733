/**
 * The refresh planner: seed 000's `jobs.refresh()` as a pure function. Given the source's keys,
 * the target's keys, the queue's current jobs, the resolved settings and the time, it returns
 * what to do, in seed 000's order, and the counts the command answers with:
 *
 * 1. add: every key of the source within `restrict` that is not in the target and has no job
 *    (any status, ignored included: an ignored key has its job);
 * 2. re-pend (keep_completed only): a key within `restrict`, in the source and not in the target,
 *    whose latest job succeeded (and that has no pending, running or ignored job) gets a new
 *    pending job in place of its success job(s);
 * 3. stale (stale_timeout_s > 0): every job, any status but ignore, created more than
 *    stale_timeout_s ago whose key is no longer in the (whole) source is removed;
 * 4. orphan (orphan_timeout_s given): every running job claimed more than orphan_timeout_s ago
 *    (not already removed as stale) is removed, and its key added again as pending when it is
 *    still in the source, not in the target, and holds no other pending, running or ignored job
 *    (seed 000's edge case: a worker that crashed after writing its target row leaves nothing
 *    to redo).
 *
 * `restrict` narrows what is queued (steps 1 and 2: seed 000's "conditions to filter key_source
 * for adding new jobs"); removals look at the whole source and every job, else a restricted
 * refresh would call every job outside its restriction stale. Times are compared strictly
 * ("older than"), so a job created at `now` is never stale or orphaned in the same instant,
 * which is what makes planning again right after applying a plan a no-op.
 *
 * A target row matches a source key when it has every attribute of the key with the same value
 * (extra target attributes, e.g. DataJoint's legacy non-FK primary key parts, are ignored).
 * Key identity is canonical JSON (src/ids.ts), the string keyed job ids are derived from.
 * The jobs come as a view by key (KeyedJobs: the node's key index, or an array for tests), and
 * the source as SourceKeys looked up in that view while it was read, so a refresh that adds
 * nothing never walks the queue's jobs. No I/O, no clock, no ids: the caller turns actions into
 * events.
 */
import type { JobStatus } from '../../machines/index.js';
import { keyIdentity, type Key, type KeyValue } from './key.js';
import { matchesRestriction, type Restriction } from './restrict.js';
import type { ResolvedRefreshSettings } from './settings.js';

/** Seed 000's statuses of a job in a job set. */
export type JobSetStatus = 'pending' | 'reserved' | 'success' | 'error' | 'ignore';

/**
 * docket's job states as seed 000's statuses, as the progress view counts them
 * (src/projections/progress.ts: error = failed, ignore = ignored + skipped). `skipped` (its
 * handler found nothing to do for the key) holds its key as `ignore` does, so a refresh does not
 * queue it again each time; `cancelled`, which progress counts apart, holds its key as `error`
 * does (stale cleanup may remove it; a delete frees the key). Exhaustive: a new JobStatus fails
 * to compile here.
 */
export function jobSetStatusOf(status: Exclude<JobStatus, 'removed'>): JobSetStatus {
  switch (status) {
    case 'new':
    case 'waiting':
    case 'queued':
      return 'pending';
    case 'running':
      return 'reserved';
    case 'succeeded':
      return 'success';
    case 'failed':
    case 'cancelled':
      return 'error';
    case 'ignored':
    case 'skipped':
      return 'ignore';
    default: {
      const never: never = status;
      throw new Error(`unknown job status ${String(never)}`);
    }
  }
}

/** One job the job set's views show (not removed): keyed jobs only, unkeyed ones are outside the plan. */
export interface PlanJob {
  readonly jobId: string;
  /** The job's key as submitted (compared by canonical JSON). */
  readonly key: Key | string;
  /** `canonicalJson(key)` when the caller has it already (the key index keeps it): saves computing it. */
  readonly identity?: string | undefined;
  readonly status: JobSetStatus;
  /** When job.submitted was appended (seed 000's created_time). */
  readonly createdAtMs: number;
  /** When its run was claimed (seed 000's reserved_time); orphan age counts from it, else from createdAtMs. */
  readonly reservedAtMs?: number | null | undefined;
}

/** A job of the view with its place in submit order (stream sequence, or index in an array). */
export interface OrderedPlanJob {
  readonly job: PlanJob;
  readonly order: number;
}

/**
 * The queue's keyed jobs in the views, by key, as the planner asks for them. Each key that ever
 * held a job has a slot, a number from 0 under `slotCount` that names it as long as the view
 * lives (slots are only ever added), so the source's keys are looked up once, while they are
 * read, and the plan works on slots. Two implementations: `keyedJobsOf` over an array of jobs
 * (tests, benches) and the node's key index (src/jobsets/plan-jobs.ts indexedJobs), which saves
 * a refresh building a map of every job of the queue.
 */
export interface KeyedJobs {
  readonly slotCount: number;
  /** The key's slot, or -1 when no job ever held it. */
  slotOf(identity: string): number;
  /**
   * The same for a normalised key (key.ts), without building its identity: what a refresh asks
   * for every source key (src/jobsets/key-table.ts).
   */
  slotOfKey(key: Key): number;
  /** The key of a slot slotOfKey answered (an equal key: the one its first job was submitted with). */
  keyAt(slot: number): Key;
  identityAt(slot: number): string;
  /** Whether the slot's key holds a job in the views (any status). */
  holds(slot: number): boolean;
  /** The slot's jobs in the views, in submit order. */
  jobsAt(slot: number): readonly OrderedPlanJob[];
}

/** A KeyedJobs over jobs given in submit order. */
export function keyedJobsOf(jobs: Iterable<PlanJob>): KeyedJobs {
  const slots = new Map<string, number>();
  const identities: string[] = [];
  const keys: (Key | string)[] = [];
  const held: OrderedPlanJob[][] = [];
  let order = 0;
  for (const job of jobs) {
    const identity = job.identity ?? identityOf(job.key);
    let slot = slots.get(identity);
    if (slot === undefined) {
      slot = identities.length;
      slots.set(identity, slot);
      identities.push(identity);
      keys.push(job.key);
      held.push([]);
    }
    held[slot]!.push({ job, order: order++ });
  }
  return {
    slotCount: identities.length,
    slotOf: (identity) => slots.get(identity) ?? -1,
    slotOfKey: (key) => slots.get(identityOf(key)) ?? -1,
    // A slot found by a key's identity holds an object key (a string's identity is no object's).
    keyAt: (slot) => keys[slot] as Key,
    identityAt: (slot) => identities[slot]!,
    holds: (slot) => held[slot]!.length > 0,
    jobsAt: (slot) => held[slot]!,
  };
}

/**
 * A source's distinct keys (first occurrence wins: a source may repeat a row), in source order,
 * each looked up in the job view as it arrives: `add` takes the source's batches while it is
 * still being read, so lookups overlap the read. A key found in the view is kept as its slot
 * alone (the view holds an equal key: KeyedJobs.keyAt), so a refresh that adds nothing keeps no
 * source key past its batch; a key read without a slot is kept with its identity, and looked up
 * again when planned (a job may have been created for it meanwhile).
 */
export class SourceKeys {
  /** Per distinct key, in source order: its slot (≥ 0), or -1 - i for the i-th key read without one. */
  private entries = new Int32Array(1024);
  private count = 0;
  /** The keys read without a slot, and their identities. */
  private readonly newKeys: Key[] = [];
  private readonly newIdentities: string[] = [];
  private seenSlots = new Uint8Array(1024);
  private readonly seenIdentities = new Set<string>();
  /** The view's slot count before the first key was read: while it is unchanged, a key read without a slot still has none. */
  readonly slotCountBefore: number;

  constructor(readonly jobs: KeyedJobs) {
    this.slotCountBefore = jobs.slotCount;
  }

  static of(keys: Iterable<Key>, jobs: KeyedJobs): SourceKeys {
    const source = new SourceKeys(jobs);
    source.add(Array.isArray(keys) ? (keys as readonly Key[]) : [...keys]);
    return source;
  }

  /** How many distinct keys were read. */
  get length(): number {
    return this.count;
  }

  /** The `index`-th key's slot when it was read (-1: none). */
  slotAt(index: number): number {
    const entry = this.entries[index]!;
    return entry >= 0 ? entry : -1;
  }

  /** The `index`-th key (read without a slot: as read; else the view's equal key). */
  keyAt(index: number): Key {
    const entry = this.entries[index]!;
    return entry >= 0 ? this.jobs.keyAt(entry) : this.newKeys[-1 - entry]!;
  }

  /** The `index`-th key's identity when it was read without a slot (else the view has it). */
  identityAt(index: number): string | undefined {
    const entry = this.entries[index]!;
    return entry >= 0 ? undefined : this.newIdentities[-1 - entry];
  }

  add(batch: readonly Key[]): void {
    for (const key of batch) {
      // A key that has a job is found by its values; only a new one's identity is built.
      const slot = this.jobs.slotOfKey(key);
      if (slot >= 0) {
        if (slot >= this.seenSlots.length) this.seenSlots = grown(this.seenSlots, slot);
        if (this.seenSlots[slot] === 1) continue;
        this.seenSlots[slot] = 1;
        this.push(slot);
      } else {
        const identity = identityOf(key);
        if (this.seenIdentities.has(identity)) continue;
        this.seenIdentities.add(identity);
        this.push(-1 - this.newKeys.length);
        this.newKeys.push(key);
        this.newIdentities.push(identity);
      }
    }
  }

  private push(entry: number): void {
    if (this.count === this.entries.length) this.entries = grown(this.entries, this.count);
    this.entries[this.count++] = entry;
  }
}

/** A copy of `array` long enough to hold index `at` (doubling). */
function grown<T extends Int32Array | Uint8Array>(array: T, at: number): T {
  let length = array.length;
  while (length <= at) length *= 2;
  const copy = new (array.constructor as new (length: number) => T)(length);
  copy.set(array);
  return copy;
}

export interface RefreshPlanInput {
  /** Every key of the source (not restricted: step 3 needs them all); SourceKeys over `jobs` when read as it streamed. */
  readonly source: Iterable<Key> | SourceKeys;
  readonly restrict?: Restriction | undefined;
  /** The target's rows (keys already computed); none: nothing is computed yet. */
  readonly target?: Iterable<Key> | undefined;
  /** The queue's current jobs, in submit order, or a view of them by key. */
  readonly jobs: Iterable<PlanJob> | KeyedJobs;
  readonly settings: ResolvedRefreshSettings;
  readonly nowMs: number;
}

export type PlanAction =
  /** Step 1: submit a pending job for the key. */
  | { readonly type: 'add'; readonly key: Key; readonly identity: string }
  /** Step 2: remove these success jobs of the key and submit a pending job for it. */
  | { readonly type: 're_pend'; readonly key: Key; readonly identity: string; readonly removeJobIds: readonly string[] }
  /** Step 3: remove a job whose key left the source. */
  | { readonly type: 'remove_stale'; readonly jobId: string; readonly identity: string }
  /** Step 4: remove an orphaned running job; `reAdd`: submit a pending job for `key` again. */
  | { readonly type: 'orphan'; readonly jobId: string; readonly identity: string; readonly key: Key | null; readonly reAdd: boolean };

export interface RefreshCounts {
  readonly added: number;
  readonly removed: number;
  readonly orphaned: number;
  readonly re_pended: number;
}

export interface RefreshPlan {
  /** In seed 000's order: adds, re-pends, stale removals, orphans. */
  readonly actions: readonly PlanAction[];
  readonly counts: RefreshCounts;
  /** Every job the plan submits (adds, re-pends, orphan re-adds) takes this priority... */
  readonly priority: number;
  /** ...and is due at this time (now + delay). */
  readonly runAtMs: number;
}

/** The key's identity, the string keyed job ids are derived from (canonical JSON). */
export function identityOf(key: Key | string): string {
  return keyIdentity(key);
}

/** Target rows indexed by their projection onto each attribute set the source's keys use. */
class TargetIndex {
  private readonly byAttributes = new Map<string, Set<string>>();
  constructor(private readonly rows: readonly Key[]) {}

  has(key: Key, identity: string): boolean {
    if (this.rows.length === 0) return false;
    const names = Object.keys(key).sort();
    const signature = names.join('\u0000');
    let set = this.byAttributes.get(signature);
    if (set === undefined) {
      set = new Set();
      for (const row of this.rows) {
        if (!names.every((n) => Object.hasOwn(row, n))) continue;
        const projected: Record<string, KeyValue> = {};
        for (const n of names) projected[n] = row[n] as KeyValue;
        set.add(keyIdentity(projected));
      }
      this.byAttributes.set(signature, set);
    }
    return set.has(identity);
  }
}

function isHolding(status: JobSetStatus): boolean {
  return status === 'pending' || status === 'reserved' || status === 'ignore';
}

/**
 * Source keys (within `restrict`) that are not in the target, once each, in source order: seed
 * 001's direct mode (`populate --direct`: `(key_source & restrictions) - target`, no jobs), and
 * seed 000's `remaining` in a job set's progress view (its length).
 */
export function missingKeys(source: Iterable<Key>, target: Iterable<Key> | undefined, restrict?: Restriction): Key[] {
  const index = new TargetIndex(target === undefined ? [] : [...target]);
  const seen = new Set<string>();
  const missing: Key[] = [];
  for (const key of source) {
    const identity = identityOf(key);
    if (seen.has(identity)) continue;
    seen.add(identity);
    if (restrict !== undefined && !matchesRestriction(key, restrict)) continue;
    if (!index.has(key, identity)) missing.push(key);
  }
  return missing;
}

function isKeyedJobs(jobs: Iterable<PlanJob> | KeyedJobs): jobs is KeyedJobs {
  return typeof (jobs as KeyedJobs).slotOf === 'function';
}

/** A job the plan may remove, with where it stands. */
interface Candidate extends OrderedPlanJob {
  readonly slot: number;
}

const bySubmitOrder = (a: Candidate, b: Candidate) => a.order - b.order;

export function planRefresh(input: RefreshPlanInput): RefreshPlan {
  const { settings, nowMs } = input;
  const jobs = isKeyedJobs(input.jobs) ? input.jobs : keyedJobsOf(input.jobs);
  const source = input.source instanceof SourceKeys ? input.source : SourceKeys.of(input.source, jobs);
  if (source.jobs !== jobs) throw new Error('planRefresh: the source keys were looked up in another job view');
  const target = new TargetIndex(input.target === undefined ? [] : [...input.target]);
  const slotCount = jobs.slotCount;
  // Which slots' keys are in the source (first occurrence): stale and orphan ask "is this job's
  // key still in the source" by slot, without a set of every source identity.
  const inSource = new Uint8Array(slotCount);
  // The source's key of a slot that a key read without one has now (rare: a job created for it
  // while the source was read); the others' keys are the view's (jobs.keyAt).
  const lateKeys = new Map<number, Key>();
  const sourceKeyAt = (slot: number) => lateKeys.get(slot) ?? jobs.keyAt(slot);
  // No key got its first job since the source began to be read: the keys read without a slot still have none.
  const lookAgain = slotCount !== source.slotCountBefore;

  const adds: PlanAction[] = [];
  const rePends: PlanAction[] = [];
  for (let s = 0; s < source.length; s++) {
    let slot = source.slotAt(s);
    let identity = source.identityAt(s);
    if (slot < 0 && lookAgain) {
      slot = jobs.slotOf(identity!);
      if (slot >= 0 && inSource[slot] === 0) lateKeys.set(slot, source.keyAt(s));
    }
    if (slot >= 0) {
      // A key read without a slot that has one now may repeat one read with it.
      if (inSource[slot] === 1) continue;
      inSource[slot] = 1;
    }
    const hasJob = slot >= 0 && jobs.holds(slot);
    // With every key holding a job and no keep_completed (a refresh that adds nothing), neither
    // the restriction nor the target need be asked.
    if (hasJob && !settings.keepCompleted) continue;
    const key = slot >= 0 ? sourceKeyAt(slot) : source.keyAt(s);
    if (input.restrict !== undefined && !matchesRestriction(key, input.restrict)) continue;
    identity ??= jobs.identityAt(slot);
    if (target.has(key, identity)) continue;
    if (!hasJob) {
      adds.push({ type: 'add', key, identity });
      continue;
    }
    const held = jobs.jobsAt(slot);
    if (held.some(({ job }) => isHolding(job.status))) continue;
    // The latest job decides (a retry chain's failure followed by a success is a success).
    let latest = held[0]!.job;
    for (const { job } of held) if (job.createdAtMs >= latest.createdAtMs) latest = job;
    if (latest.status !== 'success') continue;
    rePends.push({ type: 're_pend', key, identity, removeJobIds: held.filter(({ job }) => job.status === 'success').map(({ job }) => job.jobId) });
  }

  const stale: PlanAction[] = [];
  const removed = new Set<string>();
  if (settings.staleTimeoutS > 0) {
    const before = nowMs - settings.staleTimeoutS * 1000;
    const candidates: Candidate[] = [];
    for (let slot = 0; slot < slotCount; slot++) {
      if (inSource[slot] === 1 || !jobs.holds(slot)) continue;
      for (const held of jobs.jobsAt(slot)) if (held.job.status !== 'ignore' && held.job.createdAtMs < before) candidates.push({ ...held, slot });
    }
    for (const { job, slot } of candidates.sort(bySubmitOrder)) {
      stale.push({ type: 'remove_stale', jobId: job.jobId, identity: jobs.identityAt(slot) });
      removed.add(job.jobId);
    }
  }

  const orphans: PlanAction[] = [];
  if (settings.orphanTimeoutS !== null) {
    const before = nowMs - settings.orphanTimeoutS * 1000;
    const candidates: Candidate[] = [];
    for (let slot = 0; slot < slotCount; slot++) {
      if (!jobs.holds(slot)) continue;
      for (const held of jobs.jobsAt(slot)) {
        const { job } = held;
        if (job.status === 'reserved' && !removed.has(job.jobId) && (job.reservedAtMs ?? job.createdAtMs) < before) candidates.push({ ...held, slot });
      }
    }
    for (const { job, slot } of candidates.sort(bySubmitOrder)) {
      const identity = jobs.identityAt(slot);
      const key = inSource[slot] === 1 ? sourceKeyAt(slot) : undefined;
      const othersHold = jobs.jobsAt(slot).some(({ job: other }) => other.jobId !== job.jobId && !removed.has(other.jobId) && isHolding(other.status));
      const reAdd = key !== undefined && !target.has(key, identity) && !othersHold;
      orphans.push({ type: 'orphan', jobId: job.jobId, identity, key: key ?? null, reAdd });
      removed.add(job.jobId);
    }
  }

  return {
    actions: [...adds, ...rePends, ...stale, ...orphans],
    counts: { added: adds.length, removed: stale.length, orphaned: orphans.length, re_pended: rePends.length },
    priority: settings.priority,
    runAtMs: nowMs + settings.delayMs,
  };
}
