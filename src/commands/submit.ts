/**
 * docket.cmd.submit: one job or a batch. Ids are derived where they can be (key + generation,
 * or command id + index), so a resend never creates a second job. A batch is split by queue and
 * each part decided by its queue's leader, its jobs joining that partition's commits; it is
 * reported per item, and resending it completes what was missing.
 */
import { isLiveStatus, Priority, type JobKey, type JsonObject } from '../../machines/index.js';
import { toIso } from '../clock.js';
import { DocketError, InvalidRequestError, UnavailableError, coerceError, excerpt, type ErrorBody } from '../errors.js';
import { dependencyOutcome } from '../reactors/dependencies.js';
import { canonicalJson, commandJobId, eventIdFor, eventIdOf, keyedJobId } from '../ids.js';
import { plainSubmitId, type JobRecord } from '../store/job-store.js';
import { assertSameCommand, commandMetaOf, createJob, createNewJobs, envelope, jobOfSubmitEvent, type CommandContext, type CommandMeta } from './handle-command.js';
import { JobDefaults, Limits } from './limits.js';
import type { JobSpec } from './schemas.js';
import type { SubmitCommand } from './validate.js';
import { applyTemplate, type MadeFrom } from '../schedules/template-submit.js';
import { submitFanOut } from './jobnode-commands.js';

export interface SubmitItemResult {
  readonly job_id: string;
  readonly status: string;
  readonly created: boolean;
}
export type SubmitItemReply = ({ ok: true } & SubmitItemResult) | { ok: false; error: ErrorBody };

/**
 * The key's first keyed id, from `generation` on, that no job holds: what a refresh submits a
 * key it found without a job in the views under (a removed job keeps its id, so the key's next
 * job takes the next generation). Synchronous, for callers that decide many jobs in one turn.
 */
export function freeKeyedJobId(ctx: Pick<CommandContext, 'store' | 'keys'>, queue: string, canonical: string, generation: number = ctx.keys.generations(queue, canonical)): { jobId: string; generation: number } {
  for (;; generation++) {
    const jobId = keyedJobId(queue, canonical, generation);
    if (!ctx.store.has(jobId)) return { jobId, generation };
  }
}

/** Tries keyed ids generation by generation: a terminal job at a generation means "the next one". */
async function submitKeyed(ctx: CommandContext, spec: JobSpec, key: JobKey, eventId: string, meta: CommandMeta, waiting: boolean, madeFrom: MadeFrom | null): Promise<SubmitItemResult> {
  const canonical = canonicalJson(key);
  let generation = ctx.keys.generations(spec.queue, canonical);
  let caughtUp = false;
  // A resend of this very command: answer with what it created.
  const found = jobOfSubmitEvent(ctx, eventId);
  const mine = found instanceof Promise ? await found : found;
  if (mine) {
    assertSameCommand(mine.commandHash, meta);
    return { job_id: mine.jobId, status: mine.state.job.value, created: true };
  }
  for (;;) {
    const live = ctx.keys.liveJob(spec.queue, canonical);
    if (live && !caughtUp) {
      // The job may have ended on another node a moment ago: decide on the current log.
      await ctx.catchUp();
      caughtUp = true;
      generation = Math.max(generation, ctx.keys.generations(spec.queue, canonical));
      continue;
    }
    if (live) return { job_id: live, status: ctx.store.get(live)?.state.job.value ?? 'queued', created: false };
    const jobId = keyedJobId(spec.queue, canonical, generation);
    // An evicted job has ended: like any ended job of the key, it sends the submit to the next generation.
    const existing = ctx.store.statusOf(jobId);
    if (existing !== undefined && !isLiveStatus(existing)) {
      generation += 1;
      continue;
    }
    const { record, created } = await createJob(ctx, submittedEvent(ctx, spec, jobId, eventId, meta, waiting, madeFrom));
    if (!created && !isLive(record)) {
      generation += 1;
      continue;
    }
    return { job_id: record.jobId, status: record.state.job.value, created };
  }
}

function isLive(record: JobRecord): boolean {
  return isLiveStatus(record.state.job.value);
}

/** The job.submitted event of a job spec, its defaults filled in. */
export function submittedEvent(ctx: CommandContext, spec: JobSpec, jobId: string, eventId: string, meta: CommandMeta, waiting = false, madeFrom: MadeFrom | null = null) {
  const now = ctx.clock.now();
  const time = toIso(now);
  // Without a delay run_at is the event's own time: the same string, held once per job.
  const runAt = spec.run_at !== undefined ? toIso(Date.parse(spec.run_at)) : spec.delay_ms ? toIso(now + spec.delay_ms) : time;
  return envelope(ctx, 'job.submitted', { queue: spec.queue, jobId }, eventId, {
    job_id: jobId,
    key: spec.key === undefined ? null : (spec.key as JobKey),
    params: (spec.params ?? {}) as JsonObject,
    priority: spec.priority ?? Priority.Default,
    position: null,
    run_at: runAt,
    max_attempts: spec.max_attempts ?? JobDefaults.maxAttempts,
    backoff: spec.backoff ?? JobDefaults.backoff,
    attempt: 1,
    retry_of: null,
    waiting,
    ...(spec.concurrency_key === undefined ? {} : { concurrency_key: spec.concurrency_key }),
    ...(spec.depends_on === undefined ? {} : { depends_on: spec.depends_on }),
    ...(madeFrom === null ? {} : { template: madeFrom }),
  }, meta, time);
}

async function submitItem(ctx: CommandContext, spec: JobSpec, commandId: string | undefined, index: number): Promise<SubmitItemResult> {
  // Without a command id the event id is random: a resend is a new submit, as the client asked.
  // One event id per (command, item), whatever job id it lands on: a resend finds its own event.
  const commandEventId = commandId === undefined ? undefined : eventIdFor(`${commandId}#${index}`, `submit:${spec.queue}`);
  // Each item is remembered by its own body: resending the batch with one item changed is a
  // conflict for that item.
  const meta = commandMetaOf(commandId, spec);
  // A template's defaults are merged here, on the leader, after the body's hash is taken: a
  // resend is the same command even if the template was revised meanwhile.
  const { spec: made, madeFrom } = applyTemplate(spec, ctx.aggregates);
  spec = made;
  if (spec.fan_out !== undefined) {
    const jobId = commandId === undefined ? ctx.ids.next() : commandJobId(spec.queue, commandId, index);
    return submitFanOut(ctx, spec, jobId, commandEventId ?? plainSubmitId(jobId), meta, madeFrom);
  }
  const waiting = await waitsOnDependencies(ctx, spec);
  if (spec.key !== undefined) return submitKeyed(ctx, spec, spec.key as JobKey, commandEventId ?? eventIdOf(ctx.ids.next()), meta, waiting, madeFrom);
  const jobId = commandId === undefined ? ctx.ids.next() : commandJobId(spec.queue, commandId, index);
  // A plain submit's event id is derived from its random job id (the store need not keep it).
  const eventId = commandEventId ?? plainSubmitId(jobId);
  const { record, created } = await createJob(ctx, submittedEvent(ctx, spec, jobId, eventId, meta, waiting, madeFrom));
  return { job_id: record.jobId, status: record.state.job.value, created };
}

/**
 * Whether a job with `depends_on` starts `waiting`: yes unless every dependency has succeeded
 * already. A dependency this node cannot find (after catching up) is `invalid_request`; so is one
 * that has already ended otherwise for good (the job could never run: refused rather than
 * created skipped, a choice documented in README).
 */
async function waitsOnDependencies(ctx: CommandContext, spec: JobSpec): Promise<boolean> {
  if (spec.depends_on === undefined) return false;
  let waiting = false;
  for (const dependencyId of spec.depends_on) {
    let outcome = dependencyOutcome(ctx, dependencyId);
    if (outcome === undefined) {
      await ctx.catchUp();
      outcome = dependencyOutcome(ctx, dependencyId);
    }
    if (outcome === undefined) throw new InvalidRequestError(`depends_on names job ${excerpt(dependencyId)}, which does not exist`, { details: { job_id: excerpt(dependencyId) } });
    if (outcome.kind === 'ended') throw new InvalidRequestError(`depends_on names job ${dependencyId}, which has ${outcome.jobId === dependencyId ? '' : `a retry chain that `}ended ${outcome.status}: this job could never run`, { details: { job_id: dependencyId, status: outcome.status } });
    if (outcome.kind === 'pending') waiting = true;
  }
  return waiting;
}

/** Runs `fn` over `items` with at most `limit` in flight, keeping order in the results. */
async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  });
  await Promise.all(workers);
  return results;
}

/** The items of a submit that belong to one queue, each with its index in the whole command. */
export interface SubmitPart {
  readonly id?: string;
  readonly items: readonly { readonly index: number; readonly spec: JobSpec }[];
}

/** A submit split by queue: each part is decided by its queue's leader. */
export function splitByQueue(command: SubmitCommand): Map<string, SubmitPart> {
  const parts = new Map<string, { index: number; spec: JobSpec }[]>();
  command.jobs.forEach((spec, index) => {
    const items = parts.get(spec.queue) ?? [];
    if (items.length === 0) parts.set(spec.queue, items);
    items.push({ index, spec });
  });
  return new Map([...parts].map(([queue, items]) => [queue, command.id === undefined ? { items } : { id: command.id, items }]));
}

/** Submits one queue's part, on its leader; every item is answered on its own. */
export async function submitPart(ctx: CommandContext, part: SubmitPart): Promise<SubmitItemReply[]> {
  const replies = new Array<SubmitItemReply>(part.items.length);
  // Plain submits (no key, no command id) take random ids: nothing to look up, so they are
  // decided together and handed to the writer at once.
  const plain: number[] = [];
  const others: number[] = [];
  // A job made from a template, or waiting on others, is decided on its own.
  part.items.forEach((item, i) => (part.id === undefined && item.spec.key === undefined && item.spec.depends_on === undefined && item.spec.template === undefined && item.spec.fan_out === undefined ? plain : others).push(i));
  await Promise.all([
    plain.length === 0 ? undefined : submitPlain(ctx, plain.map((i) => part.items[i]!.spec)).then(
      (answers) => plain.forEach((i, k) => (replies[i] = answers[k]!)),
      (err: unknown) => plain.forEach((i) => (replies[i] = failedItem(ctx, err, part.items[i]!.spec))),
    ),
    mapLimited(others, Limits.MaxAppendsInFlight, async (i) => {
      const { index, spec } = part.items[i]!;
      try {
        replies[i] = { ok: true as const, ...(await submitItem(ctx, spec, part.id, index)) };
      } catch (err) {
        replies[i] = failedItem(ctx, err, spec);
      }
    }),
  ]);
  return replies;
}

async function submitPlain(ctx: CommandContext, specs: readonly JobSpec[]): Promise<SubmitItemReply[]> {
  const events = specs.map((spec) => {
    const jobId = ctx.ids.next();
    return submittedEvent(ctx, spec, jobId, plainSubmitId(jobId), {});
  });
  const created = await createNewJobs(ctx, specs[0]!.queue, events);
  return created.map((record, k) => (record instanceof Error ? failedItem(ctx, record, specs[k]!) : { ok: true as const, job_id: record.jobId, status: record.state.job.value, created: true }));
}

/** An item's failure as its reply: a DocketError as it is, anything else `unavailable` (and logged). */
function failedItem(ctx: CommandContext, err: unknown, spec: JobSpec): SubmitItemReply {
  if (err instanceof DocketError) return { ok: false as const, error: err.toBody() };
  ctx.log.error({ err: coerceError(err), queue: spec.queue }, 'submit failed');
  return { ok: false as const, error: { code: 'unavailable' as const, message: coerceError(err).message } };
}

/**
 * docket.cmd.submit as a whole: split by queue, each part run on its queue's leader (`runPart`),
 * the replies put back in the command's order. A part that fails as a whole (its leader
 * unavailable) answers each of its items with that error.
 */
export async function submitCommand(command: SubmitCommand, runPart: (queue: string, part: SubmitPart) => Promise<readonly SubmitItemReply[]>): Promise<Record<string, unknown>> {
  const results = new Array<SubmitItemReply>(command.jobs.length);
  await Promise.all(
    [...splitByQueue(command)].map(async ([queue, part]) => {
      let replies: readonly SubmitItemReply[];
      try {
        replies = await runPart(queue, part);
      } catch (err) {
        const error = (err instanceof DocketError ? err : new UnavailableError(coerceError(err).message)).toBody();
        replies = part.items.map(() => ({ ok: false as const, error }));
      }
      part.items.forEach((item, i) => (results[item.index] = replies[i]!));
    }),
  );
  if (command.batch) return { jobs: results };
  const only = results[0]!;
  if (!only.ok) return { ...only, ok: false };
  const { ok: _ok, ...rest } = only;
  return rest;
}
