/**
 * Job sets on the queue's leader (issue 14): `docket.cmd.jobset.put` stores a job set's
 * definition on the queue's aggregate (`queue.jobset_put`), `docket.cmd.refresh` reads its key
 * source and target, plans seed 000's refresh (src/jobsets/plan.ts) over the queue's keyed jobs
 * in the views, and appends what it decided, and `docket.cmd.jobset.show` answers the job set's
 * definition and progress in DataJoint's terms.
 *
 * A refresh reads both sources to the end before it decides (a failing source appends nothing),
 * then plans and decides every event synchronously against committed state (jobs with an event
 * in flight in the writer are waited out, up to five times, then left for the next refresh, as the
 * bulk commands do), and hands them to the partition's writer in the same turn; past the first
 * 2,000 adds the rest are decided and handed over 2,000 a turn, each checked again then (a key
 * that got a job meanwhile is left alone), so a million-key refresh never holds the event loop
 * for longer than the leadership lease:
 * - an add is a keyed `job.submitted` (the key's next free keyed id: src/commands/submit.ts);
 * - a stale removal is `job.removed {reason: stale}` (a running stale job is cancelled first, in
 *   the same commit: a running job is never removed);
 * - a re-pend (keep_completed) removes the key's success jobs (`completed`) and submits a new
 *   pending job, in one commit;
 * - an orphan cancels the running job (`orphan`), removes it (`orphan`) and, when its key is still
 *   wanted, submits it again, in one commit.
 * Once every job event is stored, `queue.refreshed {counts}` records the answer on the queue's
 * aggregate: with a command id its event id is derived from it, and a resend finds it among the
 * queue's latest refreshes and answers with the first counts, appending nothing.
 *
 * `docket.cmd.ignore` and `docket.cmd.delete` are seed 000's `jobs.ignore(key)` and
 * `(jobs & condition).delete()` on the same state (see each).
 */
import { decideAggregate, decideJob, evolveJob, INITIAL_JOB_STATE, type JobEvent, type JobSetDefinition, type JobState, type QueueContext, type RefreshedCounts } from '../../machines/index.js';
import { toIso } from '../clock.js';
import { DocketError, InvalidRequestError, InvalidTransitionError, UnavailableError, coerceError } from '../errors.js';
import { eventIdFor, eventIdOf } from '../ids.js';
import { keyIdentity, type Key } from '../jobsets/key.js';
import { indexedJobs, planJobOf } from '../jobsets/plan-jobs.js';
import { missingKeys, planRefresh, type PlanAction, type PlanJob } from '../jobsets/plan.js';
import { readRefreshInputs, readRefreshSource, type JobSetSources } from '../jobsets/refresh-inputs.js';
import { matchesRestriction, type Restriction, type RestrictionTerm } from '../jobsets/restrict.js';
import { resolveRefreshSettings } from '../jobsets/settings.js';
import type { Progress } from '../projections/progress.js';
import type { QueueIndex } from '../projections/queue-index.js';
import type { JobRecord } from '../store/job-store.js';
import type { PartitionWriter } from '../store/partition-writer.js';
import { aggregateEnvelope, assertSameCommand, commandMetaOf, envelope, jobOfSubmitEvent, transitionAggregate, type CommandContext, type CommandMeta } from './handle-command.js';
import { deleteSchema, ignoreSchema, jobSetPutSchema, jobSetShowSchema, refreshSchema, type DeleteCommand, type IgnoreCommand, type JobSetPutCommand, type JobSetShowCommand, type RefreshCommand } from './jobset-schemas.js';
import { JobSetDefaults } from './limits.js';
import { freeKeyedJobId, submittedEvent } from './submit.js';
import { validate } from './validate.js';

const queueRef = (queue: string) => ({ kind: 'queue' as const, id: queue, queue });

/** The job set's definition, or undefined for a plain queue. */
export function jobSetOf(ctx: Pick<CommandContext, 'aggregates'>, queue: string): JobSetDefinition | undefined {
  return ctx.aggregates.stateOf<QueueContext>('queue', queue).context.jobset ?? undefined;
}

/** Whether a keyed job of this queue leaves the views when it succeeds (a job set without keep_completed). */
export function removesCompleted(ctx: Pick<CommandContext, 'aggregates'>, record: JobRecord): boolean {
  if (record.state.job.context.key === null) return false;
  const jobSet = jobSetOf(ctx, record.queue);
  return jobSet !== undefined && (jobSet.keep_completed ?? JobSetDefaults.keepCompleted) === false;
}

export interface JobSetPutReply {
  readonly queue: string;
  readonly jobset: JobSetDefinition;
  readonly replayed: boolean;
}

/** docket.cmd.jobset.put on the queue's leader: one `queue.jobset_put`, replacing the definition. */
export async function putJobSet(ctx: CommandContext, command: JobSetPutCommand): Promise<JobSetPutReply> {
  const { id, ...definition } = command;
  const { queue } = definition;
  const { queue: _queue, ...data } = definition;
  const { record, replayed } = await transitionAggregate<QueueContext>(ctx, queueRef(queue), id, (_state, eventId) =>
    aggregateEnvelope(ctx, 'queue.jobset_put', queueRef(queue), eventId, data as unknown as JobSetDefinition, commandMetaOf(id, definition)),
  );
  return { queue, jobset: record.state.context.jobset ?? (data as unknown as JobSetDefinition), replayed };
}

export interface RefreshReply extends RefreshedCounts {
  readonly queue: string;
  /** A resend (same command id): the first refresh's counts; nothing was appended. */
  readonly replayed: boolean;
}

export interface JobSetDeps {
  readonly context: CommandContext;
  readonly queueIndex: Pick<QueueIndex, 'after' | 'has'>;
  readonly progress: Pick<Progress, 'of'>;
  /** The environment password_env and commands read (the node's). */
  readonly env: Readonly<Record<string, string | undefined>>;
}

/** How many times a refresh waits for jobs busy in the writer before it leaves them for the next refresh (as bulk-commands.ts). */
const BUSY_ROUNDS = 5;

/**
 * Adds decided and handed to the writer in one turn of the event loop: a million adds decided in
 * one turn held the loop for over a minute on a loaded machine, far past the leadership lease.
 */
const ADDS_PER_TURN = 2_000;
/** Turns of adds handed to the writer and not yet stored, at most. */
const TURNS_IN_FLIGHT = 5;

/** The queue's keyed jobs in the views, as the planner sees them. */
function planJobs(deps: JobSetDeps, queue: string): PlanJob[] {
  const jobs: PlanJob[] = [];
  for (const { jobId } of deps.queueIndex.after(queue, 0)) {
    const record = deps.context.store.get(jobId);
    const job = record === undefined ? undefined : planJobOf(record);
    if (job !== undefined) jobs.push(job);
  }
  return jobs;
}

/**
 * One planned action's events, stored together when there are several (one job's cancel and
 * removal, a removal and its replacement).
 */
interface Item {
  readonly type: PlanAction['type'];
  readonly events: readonly JobEvent[];
}

/** Turns the plan into events decided by the machines, on the state as it is now (synchronous). */
function decide(deps: JobSetDeps, queue: string, actions: readonly PlanAction[], plan: { priority: number; runAtMs: number }, commandId: string | undefined, meta: CommandMeta): Item[] {
  const ctx = deps.context;
  const now = ctx.clock.now();
  const items: Item[] = [];
  /** Each event's id: derived from the command id (and the job, and its place among the job's events) when there is one. */
  const eventId = (jobId: string, index: number) => (commandId === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(commandId, jobId, index));
  // A key added twice in one plan (re-pend and orphan of the same key cannot both happen, but
  // ids must not be reused within the plan whatever it holds).
  const taken = new Set<string>();
  const submit = (key: Key, identity: string): JobEvent => {
    let { jobId, generation } = freeKeyedJobId(ctx, queue, identity);
    while (taken.has(jobId)) ({ jobId, generation } = freeKeyedJobId(ctx, queue, identity, generation + 1));
    taken.add(jobId);
    const spec = { queue, key: key as never, priority: plan.priority, ...(plan.runAtMs > now ? { run_at: toIso(plan.runAtMs) } : {}) };
    return submittedEvent(ctx, spec, jobId, eventId(jobId, 0), meta);
  };
  /** The events that take an existing job out of the views: a running one is cancelled first. */
  const removal = (jobId: string, reason: 'stale' | 'orphan' | 'completed'): JobEvent[] => {
    const record = ctx.store.get(jobId)!;
    const out: JobEvent[] = [];
    if (record.state.job.value === 'running') out.push(envelope(ctx, 'job.cancelled', record, eventId(jobId, 0), { reason }, meta));
    out.push(envelope(ctx, 'job.removed', record, eventId(jobId, out.length), { reason }, meta));
    return out;
  };
  for (const action of actions) {
    switch (action.type) {
      case 'add':
        items.push({ type: action.type, events: [submit(action.key, action.identity)] });
        break;
      case 'remove_stale':
        items.push({ type: action.type, events: removal(action.jobId, 'stale') });
        break;
      case 're_pend':
        items.push({ type: action.type, events: [...action.removeJobIds.flatMap((jobId) => removal(jobId, 'completed')), submit(action.key, action.identity)] });
        break;
      case 'orphan': {
        const events = removal(action.jobId, 'orphan');
        if (action.reAdd && action.key !== null) events.push(submit(action.key, action.identity));
        items.push({ type: action.type, events });
        break;
      }
      default: {
        const unhandled: never = action;
        return unhandled;
      }
    }
  }
  // Decided by the machines, each on the state the events before it leave (a job's cancel, then
  // its removal). Planned from these very states a moment ago: a refusal is a bug in the planning.
  decideAll(queue, ctx, items.flatMap((item) => item.events));
  return items;
}

/** What was done, by the items kept. */
function countsOf(items: readonly Item[]): RefreshedCounts {
  const count = (type: PlanAction['type']) => items.filter((item) => item.type === type).length;
  return { added: count('add'), removed: count('remove_stale'), orphaned: count('orphan'), re_pended: count('re_pend') };
}

/** A resend of this refresh: the counts the queue's aggregate recorded under its event id. */
function earlierRefresh(ctx: CommandContext, queue: string, eventId: string, meta: CommandMeta): RefreshedCounts | undefined {
  const record = ctx.aggregates.get<QueueContext>('queue', queue);
  const found = record?.state.context.refreshes.find((r) => r.event_id === eventId);
  if (found === undefined) return undefined;
  assertSameCommand(record?.history.find((h) => h.id === eventId)?.commandHash, meta);
  return found.counts;
}

/** A refresh's restriction as keys hold values: a boolean as 1 or 0, as the one normalisation gives keys (src/jobsets/key.ts). */
export function restrictionOf(restrict: RefreshCommand['restrict']): Restriction | undefined {
  if (restrict === undefined) return undefined;
  const term = (t: Readonly<Record<string, string | number | boolean | null>>): RestrictionTerm =>
    Object.fromEntries(Object.entries(t).map(([name, value]) => [name, typeof value === 'boolean' ? (value ? 1 : 0) : value]));
  return Array.isArray(restrict) ? restrict.map(term) : term(restrict as Readonly<Record<string, string | number | boolean | null>>);
}

/** docket.cmd.refresh on the queue's leader. */
export async function refreshJobSet(deps: JobSetDeps, command: RefreshCommand): Promise<RefreshReply> {
  const ctx = deps.context;
  const { id, ...body } = command;
  const { queue } = body;
  const meta = commandMetaOf(id, { verb: 'refresh', ...body });
  const writer = await ctx.writer(queue);
  const refreshedId = id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(id, `queue-${queue}`);
  if (id !== undefined) {
    const earlier = earlierRefresh(ctx, queue, refreshedId, meta);
    if (earlier !== undefined) return { queue, ...earlier, replayed: true };
  }
  const definition = jobSetOf(ctx, queue);
  if (definition === undefined) throw new InvalidRequestError(`queue ${queue} is not a job set: define its key source first (docket.cmd.jobset.put, docket jobset put)`, { details: { queue } });
  // Read to the end before anything is decided: a failing source appends nothing.
  // The queue's jobs by key, from the key index: the source's keys are looked up as they are read.
  const jobs = indexedJobs(ctx.keys.keysOf(queue), (jobId) => ctx.store.get(jobId));
  // A read of a large source may take longer than the leadership lease: the queue stays led meanwhile.
  const inputs = await writer.hold(() => readRefreshSource(definition as unknown as JobSetSources, { env: deps.env }, jobs));
  for (let round = 0; ; round++) {
    // The definition may have changed while the sources were read: plan with the current one.
    const settings = resolveRefreshSettings(body, jobSetOf(ctx, queue) ?? definition);
    const plan = planRefresh({ source: inputs.source, target: inputs.target, restrict: restrictionOf(body.restrict), jobs, settings, nowMs: ctx.clock.now() });
    // Adds come first in the plan: the first ADDS_PER_TURN of them and every other action now,
    // the rest of the adds a turn apart below.
    const added = plan.counts.added;
    const firstAdds = Math.min(added, ADDS_PER_TURN);
    const decided = decide(deps, queue, [...plan.actions.slice(0, firstAdds), ...plan.actions.slice(added)], plan, id, meta);
    // A job with an event in flight in the writer (a claim, a cancel; a keyed submit of the same
    // key takes the same id): wait it out and plan again on the settled state.
    const isBusy = (item: Item) => item.events.some((event) => writer.isBusy(event.aggregate.id));
    const busyItems = decided.filter(isBusy);
    if (busyItems.length > 0 && round < BUSY_ROUNDS) {
      await Promise.all(busyItems.flatMap((item) => item.events.map((event) => writer.settled(event.aggregate.id))));
      continue;
    }
    // Still busy after every round: something else keeps deciding those jobs; the next refresh sees them settled.
    const kept = busyItems.length === 0 ? decided : decided.filter((item) => !isBusy(item));
    if (busyItems.length > 0) ctx.log.info({ queue, busy: busyItems.length }, 'refresh left out jobs another command kept busy');
    const stored = [handOver(writer, kept)];
    const done = [...kept];
    // The remaining adds, ADDS_PER_TURN a turn, so that the leader's other work (its lease above
    // all) runs between them. Each is checked again when decided: a key that got a job meanwhile,
    // or whose keyed id another command has in flight, is left alone, as a plan made then would.
    const later = plan.actions.slice(firstAdds, added).filter((action) => action.type === 'add');
    for (let start = 0; start < later.length; start += ADDS_PER_TURN) {
      // At most TURNS_IN_FLIGHT turns' adds wait in the writer: the rest are decided as commits
      // are acknowledged, so a million adds never queue at once (nor starve the lease's renewal).
      const earlier = stored[stored.length - TURNS_IN_FLIGHT];
      if (earlier !== undefined) await earlier;
      await new Promise((resolve) => setImmediate(resolve));
      const stillFree = later.slice(start, start + ADDS_PER_TURN).filter((action) => {
        const slot = jobs.slotOf(action.identity);
        return slot < 0 || !jobs.holds(slot);
      });
      const items = decide(deps, queue, stillFree, plan, id, meta).filter((item) => !isBusy(item));
      stored.push(handOver(writer, items));
      done.push(...items);
    }
    failIfAny(ctx, queue, (await Promise.all(stored)).flat());
    return { queue, ...(await recordRefresh(ctx, writer, queue, refreshedId, countsOf(done), meta)), replayed: false };
  }
}

/**
 * Hands the decided events to the writer in one turn: single events through appendEach (as few
 * commits as they fit), each item of several events as one commit. Resolves with the errors of
 * the commits that failed (the stored ones stay: a refresh again completes the rest).
 */
async function handOver(writer: PartitionWriter, items: readonly Item[]): Promise<Error[]> {
  const singles = items.filter((item) => item.events.length === 1).map((item) => item.events[0]!);
  const groups = items.filter((item) => item.events.length > 1);
  const results = await Promise.allSettled([singles.length === 0 ? Promise.resolve([]) : writer.appendEach(singles), ...groups.map((item) => writer.append(item.events))]);
  const errors: Error[] = [];
  for (const result of results) {
    if (result.status === 'rejected') errors.push(coerceError(result.reason));
    else for (const p of result.value) if (p instanceof Error) errors.push(p);
  }
  return errors;
}

/** Throws the first failed commit's error, when any failed. */
function failIfAny(ctx: CommandContext, queue: string, errors: readonly Error[]): void {
  if (errors.length === 0) return;
  ctx.log.warn({ queue, failed: errors.length, err: errors[0] }, 'refresh partly stored');
  const first = errors[0]!;
  throw first instanceof DocketError ? first : new UnavailableError(`refresh of ${queue}: ${first.message} (some of its events were not stored; refresh again)`, { cause: first });
}

/** `queue.refreshed` with the counts: what a resend answers with. */
async function recordRefresh(ctx: CommandContext, writer: PartitionWriter, queue: string, eventId: string, counts: RefreshedCounts, meta: CommandMeta): Promise<RefreshedCounts> {
  const event = aggregateEnvelope(ctx, 'queue.refreshed', queueRef(queue), eventId, { ...counts }, meta);
  const decision = decideAggregate(ctx.aggregates.stateOf('queue', queue), event);
  if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { queue } });
  await writer.append([event]);
  return counts;
}

export interface JobSetShowReply {
  readonly queue: string;
  readonly jobset: JobSetDefinition;
  /** Seed 000's progress: pending, reserved, success, error, ignore, total (docket's cancelled apart, as docket progress). */
  readonly progress: { readonly pending: number; readonly reserved: number; readonly success: number; readonly error: number; readonly ignore: number; readonly cancelled: number; readonly total: number; readonly removed: number };
  /** Keys in the source not yet in the target; null when not asked for or a source failed (then `remaining_error`). */
  readonly remaining: number | null;
  readonly remaining_error?: string;
  /** The latest refresh: when, and its counts. */
  readonly last_refresh: { readonly at: string; readonly counts: RefreshedCounts } | null;
}

/** docket.cmd.jobset.show: answered by any node from its own fold (and, for `remaining`, its own read of the sources). */
export async function showJobSet(deps: JobSetDeps, command: JobSetShowCommand): Promise<JobSetShowReply> {
  const ctx = deps.context;
  const { queue } = command;
  let definition = jobSetOf(ctx, queue);
  if (definition === undefined) {
    await ctx.catchUp();
    definition = jobSetOf(ctx, queue);
  }
  if (definition === undefined) throw new InvalidRequestError(`queue ${queue} is not a job set`, { details: { queue } });
  const p = deps.progress.of(queue);
  let remaining: number | null = null;
  let remainingError: string | undefined;
  if (command.remaining !== false) {
    try {
      const inputs = await readRefreshInputs(definition as unknown as JobSetSources, { env: deps.env });
      remaining = missingKeys(inputs.source, inputs.target).length;
    } catch (err) {
      remainingError = coerceError(err).message;
    }
  }
  const last = ctx.aggregates.stateOf<QueueContext>('queue', queue).context.refreshes.at(-1);
  return {
    queue,
    jobset: definition,
    progress: { pending: p.pending, reserved: p.reserved, success: p.success, error: p.error, ignore: p.ignore, cancelled: p.cancelled, total: p.total, removed: p.removed ?? 0 },
    remaining,
    ...(remainingError === undefined ? {} : { remaining_error: remainingError }),
    last_refresh: last === undefined ? null : { at: last.at, counts: last.counts },
  };
}

/** A key given by hand, as keys from sources hold values: a boolean as 1 or 0 (src/jobsets/key.ts). */
function keyOf(key: Readonly<Record<string, string | number | boolean | null>>): Key {
  return Object.fromEntries(Object.entries(key).map(([name, value]) => [name, typeof value === 'boolean' ? (value ? 1 : 0) : value]));
}

/** A job set's definition, or invalid_request naming the queue. */
function requireJobSet(ctx: CommandContext, queue: string): JobSetDefinition {
  const definition = jobSetOf(ctx, queue);
  if (definition === undefined) throw new InvalidRequestError(`queue ${queue} is not a job set: define its key source first (docket.cmd.jobset.put, docket jobset put)`, { details: { queue } });
  return definition;
}

export interface IgnoreReply {
  readonly queue: string;
  readonly job_id: string;
  readonly status: 'ignored';
  /** false: the key was ignored already (or this is a resend). */
  readonly created: boolean;
}

/**
 * docket.cmd.ignore on the queue's leader (seed 000's `jobs.ignore(key)`): a pending job of the
 * key is ignored; a key with no job, or only ended ones (success, error), gets a new job that is
 * ignored in the commit that submits it (its ended jobs removed, `deleted`, in the same commit, so
 * the key has one job in the views); an ignored key is answered as it is; a running job is refused
 * (cancel it first). An ignored job is never handed out, never removed as stale, only by delete.
 */
export async function ignoreKey(deps: JobSetDeps, command: IgnoreCommand): Promise<IgnoreReply> {
  const ctx = deps.context;
  const { id, ...body } = command;
  const { queue } = body;
  const meta = commandMetaOf(id, { verb: 'ignore', ...body });
  const writer = await ctx.writer(queue);
  requireJobSet(ctx, queue);
  const key = keyOf(body.key);
  const identity = keyIdentity(key);
  const reason = body.reason ?? null;
  const submitId = id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(id, `ignore:${queue}`);
  if (id !== undefined) {
    const found = jobOfSubmitEvent(ctx, submitId);
    const mine = found instanceof Promise ? await found : found;
    if (mine) {
      assertSameCommand(mine.commandHash, meta);
      return { queue, job_id: mine.jobId, status: 'ignored', created: false };
    }
  }
  for (let round = 0; ; round++) {
    const held = planJobs(deps, queue).filter((job) => (job.identity ?? keyIdentity(job.key)) === identity);
    const busy = held.filter((job) => writer.isBusy(job.jobId));
    if (busy.length > 0 && round < BUSY_ROUNDS) {
      await Promise.all(busy.map((job) => writer.settled(job.jobId)));
      continue;
    }
    const ignored = held.find((job) => job.status === 'ignore');
    if (ignored !== undefined) return { queue, job_id: ignored.jobId, status: 'ignored', created: false };
    const running = held.find((job) => job.status === 'reserved');
    if (running !== undefined) throw new InvalidTransitionError(`cannot ignore key ${identity} of queue ${queue}: its job ${running.jobId} is running; cancel it first`, { details: { queue, job_id: running.jobId } });
    const eventId = (jobId: string, index: number) => (id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(id, jobId, index));
    const pending = held.filter((job) => job.status === 'pending');
    let events: JobEvent[];
    let jobId: string;
    if (pending.length > 0) {
      events = pending.map((job) => envelope(ctx, 'job.ignored', ctx.store.get(job.jobId)!, eventId(job.jobId, 0), { reason }, meta));
      jobId = pending[0]!.jobId;
    } else {
      const removals = held.map((job) => envelope(ctx, 'job.removed', ctx.store.get(job.jobId)!, eventId(job.jobId, 0), { reason: 'deleted' }, meta));
      ({ jobId } = freeKeyedJobId(ctx, queue, identity));
      const submitted = submittedEvent(ctx, { queue, key: key as never, params: {} }, jobId, submitId, meta);
      events = [...removals, submitted, envelope(ctx, 'job.ignored', { queue, jobId }, eventId(jobId, 1), { reason }, meta)];
    }
    if (events.some((event) => writer.isBusy(event.aggregate.id)) && round < BUSY_ROUNDS) {
      await writer.settled(jobId);
      continue;
    }
    decideAll(queue, ctx, events);
    await writer.append(events);
    return { queue, job_id: jobId, status: 'ignored', created: true };
  }
}

/** Decides events by the machines, each on the state the ones before leave; throws on a refusal (nothing appended). */
function decideAll(queue: string, ctx: CommandContext, events: readonly JobEvent[]): void {
  const states = new Map<string, JobState>();
  for (const event of events) {
    const jobId = event.aggregate.id;
    const state = states.get(jobId) ?? (event.type === 'job.submitted' ? INITIAL_JOB_STATE : ctx.store.get(jobId)?.state);
    const decision = state === undefined ? null : decideJob(state, event);
    if (decision === null || !decision.ok) throw new InvalidTransitionError(`${queue}: ${decision?.reason ?? `job ${jobId} is unknown`}`, { details: { queue, job_id: jobId } });
    states.set(jobId, evolveJob(state!, event)!);
  }
}

export interface DeleteReply {
  readonly queue: string;
  /** Jobs removed from the views (`job.removed {reason: deleted}`). */
  readonly deleted: number;
  /** Matching jobs left alone because they are running (reserved): cancel them first. */
  readonly running: number;
  /** A resend (same command id): the jobs the first send removed. */
  readonly replayed: boolean;
}

/**
 * docket.cmd.delete on the queue's leader (seed 000's `(jobs & condition).delete()`): every keyed
 * job in the views matching key, status (seed 000's) and restrict (AND), except running ones, is
 * removed (`deleted`): its key is free, so the next refresh adds it again (e.g. `status: error`
 * resets failures). With a command id a resend answers what the first send removed.
 */
export async function deleteJobs(deps: JobSetDeps, command: DeleteCommand): Promise<DeleteReply> {
  const ctx = deps.context;
  const { id, ...body } = command;
  const { queue } = body;
  const meta = commandMetaOf(id, { verb: 'delete', ...body });
  const writer = await ctx.writer(queue);
  requireJobSet(ctx, queue);
  if (id !== undefined) {
    let earlier = 0;
    for (const record of ctx.store.values()) {
      if (record.queue !== queue || record.state.job.value !== 'removed') continue;
      const mine = eventIdFor(id, record.jobId);
      const entry = record.later.find((h) => h.id === mine);
      if (entry === undefined) continue;
      assertSameCommand(entry.commandHash, meta);
      earlier += 1;
    }
    if (earlier > 0) return { queue, deleted: earlier, running: 0, replayed: true };
  }
  const identity = body.key === undefined ? undefined : keyIdentity(keyOf(body.key));
  const restrict = restrictionOf(body.restrict);
  for (let round = 0; ; round++) {
    const matching = planJobs(deps, queue).filter(
      (job) =>
        (identity === undefined || (job.identity ?? keyIdentity(job.key)) === identity) &&
        (body.status === undefined || job.status === body.status) &&
        (restrict === undefined || (typeof job.key === 'object' && matchesRestriction(job.key, restrict))),
    );
    const busy = matching.filter((job) => writer.isBusy(job.jobId));
    if (busy.length > 0 && round < BUSY_ROUNDS) {
      await Promise.all(busy.map((job) => writer.settled(job.jobId)));
      continue;
    }
    const deletable = matching.filter((job) => job.status !== 'reserved' && !writer.isBusy(job.jobId));
    const events = deletable.map((job) => envelope(ctx, 'job.removed', ctx.store.get(job.jobId)!, id === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(id, job.jobId), { reason: 'deleted' }, meta));
    decideAll(queue, ctx, events);
    failIfAny(ctx, queue, await handOver(writer, events.map((event) => ({ type: 'remove_stale' as const, events: [event] }))));
    return { queue, deleted: events.length, running: matching.filter((job) => job.status === 'reserved').length, replayed: false };
  }
}

/** What wiring the job set commands needs of the node. */
export interface JobSetWiring {
  readonly deps: JobSetDeps;
  registerOnLeader(op: string, operation: (queue: string, body: unknown) => Promise<Record<string, unknown>>): void;
  runOnLeader(queue: string, op: string, body: unknown): Promise<Record<string, unknown>>;
  registerCommand(verb: string, handler: (body: unknown) => Promise<Record<string, unknown>>): void;
}

/**
 * Registers `docket.cmd.jobset.put` (any queue name: defining a job set is what makes a new
 * queue, as queue.set with create), `docket.cmd.refresh` (a job set only) and
 * `docket.cmd.jobset.show`. Validated where received; writes run on the queue's leader.
 */
export function registerJobSetCommands(wiring: JobSetWiring): void {
  const { deps } = wiring;
  wiring.registerOnLeader('jobset.put', async (_queue, body) => ({ ...(await putJobSet(deps.context, body as JobSetPutCommand)) }));
  wiring.registerOnLeader('refresh', async (_queue, body) => ({ ...(await refreshJobSet(deps, body as RefreshCommand)) }));
  wiring.registerCommand('jobset.put', (body) => {
    const command = validate(jobSetPutSchema, body);
    return wiring.runOnLeader(command.queue, 'jobset.put', command);
  });
  wiring.registerCommand('refresh', async (body) => {
    const command = validate(refreshSchema, body);
    if (jobSetOf(deps.context, command.queue) === undefined) {
      // Made a job set on another node a moment ago?
      await deps.context.catchUp();
      if (jobSetOf(deps.context, command.queue) === undefined) throw new InvalidRequestError(`queue ${command.queue} is not a job set: define its key source first (docket.cmd.jobset.put, docket jobset put)`, { details: { queue: command.queue } });
    }
    return wiring.runOnLeader(command.queue, 'refresh', command);
  });
  for (const [verb, schema, run] of [
    ['ignore', ignoreSchema, (body: unknown) => ignoreKey(deps, body as IgnoreCommand)],
    ['delete', deleteSchema, (body: unknown) => deleteJobs(deps, body as DeleteCommand)],
  ] as const) {
    wiring.registerOnLeader(verb, async (_queue, body) => ({ ...(await run(body)) }));
    wiring.registerCommand(verb, async (body) => {
      const command = validate(schema as typeof ignoreSchema | typeof deleteSchema, body) as { queue: string };
      if (jobSetOf(deps.context, command.queue) === undefined) await deps.context.catchUp();
      requireJobSet(deps.context, command.queue);
      return wiring.runOnLeader(command.queue, verb, command);
    });
  }
  wiring.registerCommand('jobset.show', async (body) => ({ ...(await showJobSet(deps, validate(jobSetShowSchema, body))) }));
}
