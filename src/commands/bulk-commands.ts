/**
 * Bulk actions on a queue (issue 17): `docket.cmd.retry_all`, `docket.cmd.cancel_all` and
 * `docket.cmd.clean`. Each is one command that appends one event per affected job, decided on
 * the queue's leader against its committed state and handed to the partition's writer at once
 * (`appendEach`: as few commits as the events fit), so 5,000 cancels are two commits, not 5,000.
 *
 * - retry_all: a retry (a new job, `retry_of`) of every failed job whose chain has no retry yet,
 *   decided by the manual retry's own code (`planRetry`): due now, the chain's budget extended.
 * - cancel_all: `job.cancelled` for every queued (delayed included), waiting or delayed job.
 * - clean: `job.removed {reason: 'cleaned'}` for every job of one terminal status that ended at
 *   least `older_than_ms` ago: it leaves every view; the log keeps it.
 *
 * `dry_run: true` answers the count (and ids) and appends nothing. With a command `id`, each
 * event's id derives from (command id, job id) and its meta carries the body's hash, so a resend
 * finds the events of the first send and answers with them, appending nothing: also after a
 * restart, since the job records hold their history.
 */
import { decideJob, INITIAL_JOB_STATE, type JobEvent, type Position } from '../../machines/index.js';
import { DocketError, InvalidRequestError, InvalidTransitionError, UnavailableError, coerceError, type ErrorBody } from '../errors.js';
import { eventIdFor, eventIdOf } from '../ids.js';
import type { QueueIndex } from '../projections/queue-index.js';
import type { QueueOrder } from '../projections/queue-order.js';
import { planRetry } from '../reactors/retrier.js';
import type { JobRecord } from '../store/job-store.js';
import type { PartitionWriter } from '../store/partition-writer.js';
import { assertSameCommand, commandMetaOf, envelope, type CommandContext, type CommandMeta } from './handle-command.js';
import { cancelAllSchema, cleanSchema, retryAllSchema, type CancelAllCommand, type CleanCommand, type RetryAllCommand } from './schemas.js';
import { validate } from './validate.js';

export const BULK_VERBS = ['retry_all', 'cancel_all', 'clean'] as const;
export type BulkVerb = (typeof BULK_VERBS)[number];

type BulkCommand = { verb: 'retry_all'; body: RetryAllCommand } | { verb: 'cancel_all'; body: CancelAllCommand } | { verb: 'clean'; body: CleanCommand };

export interface BulkReply {
  /** Jobs acted on (or, with dry_run, that would be). */
  readonly count: number;
  /**
   * Their ids in the order acted on (retry_all: the retries created), cut to fit one reply.
   * Present unless the list was cut to nothing.
   */
  readonly job_ids: readonly string[];
  /** job_ids holds fewer than `count` ids. */
  readonly truncated?: true;
  readonly dry_run?: true;
  /** Events whose commit failed (the others are stored): run the command again to act on those jobs. */
  readonly failed?: number;
  readonly error?: ErrorBody;
}

export interface BulkDeps {
  readonly context: CommandContext;
  readonly queueIndex: Pick<QueueIndex, 'after'>;
  /** list's `delayed`: queued with its run_at not yet come by the node's clock. */
  readonly queueOrder: Pick<QueueOrder, 'isDelayed'>;
  /** Bytes a reply may fill (src/commands/reply.ts replyBudget). */
  readonly replyBudget: () => number;
}

/**
 * How many times the leader waits for jobs busy in its writer (another command's event on them
 * in flight) before leaving them out: each wait is one commit, and a job that is busy each time
 * is being worked on by something else (a claim), which decides it first.
 */
const BUSY_ROUNDS = 5;

/** One job's part of a bulk command: the event, and the aggregates it must find settled. */
interface Planned {
  readonly event: JobEvent;
  /** The job the reply names (retry_all: the retry). */
  readonly jobId: string;
  readonly busyIds: readonly string[];
}

/** The command's events' id for one job: derived from the command id when there is one. */
function eventIdOfJob(ctx: CommandContext, commandId: string | undefined, jobId: string): string {
  return commandId === undefined ? eventIdOf(ctx.ids.next()) : eventIdFor(commandId, jobId);
}

/** The jobs of the queue in the views (not removed), in submit order. */
function* queueJobs(deps: BulkDeps, queue: string): Generator<JobRecord> {
  for (const { jobId } of deps.queueIndex.after(queue, 0)) {
    const record = deps.context.store.get(jobId);
    if (record) yield record;
  }
}

/** Every affected job's event, on the state as it is now (synchronous: no decision comes between). */
function plan(deps: BulkDeps, command: BulkCommand, meta: CommandMeta): Planned[] {
  const ctx = deps.context;
  const { queue } = command.body;
  const id = command.body.id;
  const now = ctx.clock.now();
  const planned: Planned[] = [];
  switch (command.verb) {
    case 'retry_all': {
      const sinceMs = command.body.since === undefined ? -Infinity : Date.parse(command.body.since);
      for (const record of queueJobs(deps, queue)) {
        if (record.state.job.value !== 'failed') continue;
        const finished = record.state.job.context.finished_at;
        if (finished !== null && Date.parse(finished) < sinceMs) continue;
        let decided;
        try {
          // The retry's id is derived (failed job and attempt, or the key's generation); its
          // event's id is this command's for that id.
          decided = planRetry(ctx, record, { manual: true, eventIdFor: (retryId) => eventIdOfJob(ctx, id, retryId), meta });
        } catch (err) {
          // Superseded by a newer job of its key: the key's chain goes on there.
          if (err instanceof InvalidTransitionError) continue;
          throw err;
        }
        // Its chain has a retry already (live or ended): that one is the chain's end.
        if (decided.kind === 'exists') continue;
        const retryId = decided.event.data.job_id;
        planned.push({ event: decided.event, jobId: retryId, busyIds: [record.jobId, retryId] });
      }
      return planned;
    }
    case 'cancel_all': {
      const { status } = command.body;
      const reason = command.body.reason ?? 'cancel_all';
      for (const record of queueJobs(deps, queue)) {
        const value = record.state.job.value;
        const wanted = status === 'delayed' ? value === 'queued' && deps.queueOrder.isDelayed(queue, record.jobId) : value === status;
        if (!wanted) continue;
        const event = envelope(ctx, 'job.cancelled', record, eventIdOfJob(ctx, id, record.jobId), { reason }, meta);
        planned.push({ event, jobId: record.jobId, busyIds: [record.jobId] });
      }
      return planned;
    }
    case 'clean': {
      const { status, older_than_ms: olderThanMs } = command.body;
      for (const record of queueJobs(deps, queue)) {
        if (record.state.job.value !== status) continue;
        const finished = record.state.job.context.finished_at;
        if (finished === null || now - Date.parse(finished) < olderThanMs) continue;
        const event = envelope(ctx, 'job.removed', record, eventIdOfJob(ctx, id, record.jobId), { reason: 'cleaned' }, meta);
        planned.push({ event, jobId: record.jobId, busyIds: [record.jobId] });
      }
      return planned;
    }
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

/** The ids that fit one reply (each a JSON string and its comma), with `truncated` when cut. */
export function boundedIds(jobIds: readonly string[], budgetBytes: number): { job_ids: string[]; truncated?: true } {
  // Room for the rest of the reply: count, flags, an error body.
  let left = budgetBytes - 2048;
  const kept: string[] = [];
  for (const jobId of jobIds) {
    const bytes = Buffer.byteLength(jobId) + 3;
    if (bytes > left) return { job_ids: kept, truncated: true };
    left -= bytes;
    kept.push(jobId);
  }
  return { job_ids: kept };
}

function replyOf(deps: BulkDeps, jobIds: readonly string[], extra: Partial<BulkReply> = {}): BulkReply {
  return { count: jobIds.length, ...boundedIds(jobIds, deps.replyBudget()), ...extra };
}

/**
 * A resend: the jobs this command id acted on (for retry_all, the retries it created), in log
 * order, or null when there are none. A scan of the queue's jobs, removed ones too. Only jobs
 * and history entries that carry a command's hash (commands sent with an id) are looked at: for
 * those, the event id this command would have given is derived (one hash per such job) and
 * compared; a match under another body's hash is a conflict.
 */
function earlierResult(deps: BulkDeps, queue: string, commandId: string, meta: CommandMeta): string[] | null {
  const found: { jobId: string; at: Position }[] = [];
  for (const record of deps.context.store.values()) {
    if (record.queue !== queue) continue;
    let mine: string | undefined;
    const mineFor = () => (mine ??= eventIdFor(commandId, record.jobId));
    // retry_all's retries: created by this command.
    if (record.commandHash !== null && record.submitId !== null && record.submitId === mineFor()) {
      assertSameCommand(record.commandHash, meta);
      found.push({ jobId: record.jobId, at: record.submitSeq });
      continue;
    }
    for (const entry of record.later) {
      if (entry.commandHash === undefined || entry.id !== mineFor()) continue;
      assertSameCommand(entry.commandHash, meta);
      found.push({ jobId: record.jobId, at: entry.seq });
    }
  }
  if (found.length === 0) return null;
  found.sort((a, b) => a.at - b.at);
  return found.map((f) => f.jobId);
}

/** The bulk command on the queue's leader: resend, plan, wait out busy jobs, decide, append. */
export async function runBulk(deps: BulkDeps, command: BulkCommand): Promise<BulkReply> {
  const ctx = deps.context;
  const { id, dry_run: dryRun, ...rest } = command.body;
  // The verb is part of what a command id is remembered by: the same id for another verb is a conflict.
  const meta = commandMetaOf(id, { verb: command.verb, ...rest });
  const writer = await ctx.writer(command.body.queue);
  if (id !== undefined && !dryRun) {
    const earlier = earlierResult(deps, command.body.queue, id, meta);
    if (earlier !== null) return replyOf(deps, earlier);
  }
  for (let round = 0; ; round++) {
    const planned = plan(deps, command, meta);
    const busy = planned.filter((p) => p.busyIds.some((jobId) => writer.isBusy(jobId)));
    if (busy.length > 0 && round < BUSY_ROUNDS) {
      await Promise.all(busy.flatMap((p) => p.busyIds.map((jobId) => writer.settled(jobId))));
      continue;
    }
    const left = new Set(busy);
    const ready = busy.length === 0 ? planned : planned.filter((p) => !left.has(p));
    if (busy.length > 0) ctx.log.info({ queue: command.body.queue, verb: command.verb, busy: busy.length }, 'bulk command left out jobs another command kept busy');
    if (dryRun) return replyOf(deps, ready.map((p) => p.jobId), { dry_run: true });
    return append(deps, writer, command, ready);
  }
}

/** Decides each event by the machines and hands them all to the writer (no await before appendEach). */
async function append(deps: BulkDeps, writer: PartitionWriter, command: BulkCommand, planned: readonly Planned[]): Promise<BulkReply> {
  const ctx = deps.context;
  const events: JobEvent[] = [];
  const jobIds: string[] = [];
  for (const p of planned) {
    const state = command.verb === 'retry_all' ? INITIAL_JOB_STATE : ctx.store.get(p.event.aggregate.id)?.state;
    // Planned from these very states a moment ago: a refusal here is a bug in the planning.
    const decision = state === undefined ? null : decideJob(state, p.event);
    if (decision === null || !decision.ok) {
      ctx.log.error({ queue: command.body.queue, verb: command.verb, jobId: p.jobId, reason: decision?.reason }, 'bulk command planned an event the machines refuse; left out');
      continue;
    }
    events.push(decision.event);
    jobIds.push(p.jobId);
  }
  if (events.length === 0) return replyOf(deps, []);
  const positions = await writer.appendEach(events);
  const stored = jobIds.filter((_, i) => !(positions[i] instanceof Error));
  const firstError = positions.find((p): p is Error => p instanceof Error);
  if (firstError === undefined) return replyOf(deps, stored);
  const error = firstError instanceof DocketError ? firstError.toBody() : { code: 'unavailable' as const, message: coerceError(firstError).message };
  ctx.log.warn({ queue: command.body.queue, verb: command.verb, stored: stored.length, failed: events.length - stored.length, err: firstError }, 'bulk command partly stored');
  // Nothing stored: the command failed as a whole, and a resend (same id) runs it afresh.
  if (stored.length === 0) throw firstError instanceof DocketError ? firstError : new UnavailableError(error.message, { cause: firstError });
  return replyOf(deps, stored, { failed: events.length - stored.length, error });
}

/** Validates a bulk command's body (invalid_request naming the field, nothing appended). */
export function validateBulk(verb: BulkVerb, body: unknown): BulkCommand {
  switch (verb) {
    case 'retry_all':
      return { verb, body: validate(retryAllSchema, body) };
    case 'cancel_all':
      return { verb, body: validate(cancelAllSchema, body) };
    case 'clean':
      return { verb, body: validate(cleanSchema, body) };
    default: {
      const unhandled: never = verb;
      return unhandled;
    }
  }
}

/** What wiring the bulk commands needs of the node. */
export interface BulkWiring {
  readonly deps: BulkDeps;
  /** `router.register`: the operation run on the queue's leader. */
  registerOnLeader(op: string, operation: (queue: string, body: unknown) => Promise<Record<string, unknown>>): void;
  /** `router.run`: forwards to the queue's leader (or runs here). */
  runOnLeader(queue: string, op: string, body: unknown): Promise<Record<string, unknown>>;
  /** `commands.register` for `docket.cmd.<verb>`. */
  registerCommand(verb: string, handler: (body: unknown) => Promise<Record<string, unknown>>): void;
  /** Whether this node has seen a job of the queue (removed ones included). */
  knowsQueue(queue: string): boolean;
}

/**
 * Registers `docket.cmd.retry_all|cancel_all|clean`: validated where received, refused as
 * `invalid_request` for a queue no node has a job of, then run on the queue's leader.
 */
export function registerBulkCommands(wiring: BulkWiring): void {
  for (const verb of BULK_VERBS) {
    wiring.registerOnLeader(verb, async (_queue, body) => ({ ...(await runBulk(wiring.deps, body as BulkCommand)) }));
    wiring.registerCommand(verb, async (body) => {
      const command = validateBulk(verb, body);
      const { queue } = command.body;
      if (!wiring.knowsQueue(queue)) {
        // Created on another node a moment ago?
        await wiring.deps.context.catchUp();
        if (!wiring.knowsQueue(queue)) throw new InvalidRequestError(`unknown queue ${queue}: no job was ever submitted to it`, { details: { queue } });
      }
      return wiring.runOnLeader(queue, verb, command);
    });
  }
}
