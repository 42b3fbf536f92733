/**
 * The bodies of the job commands that write (cancel, retry, move), run on the leader of the
 * job's queue. Each is decided by the job's machines through the write door.
 */
import { commandMetaOf, envelope, findJob, transitionJob, type CommandContext } from './handle-command.js';
import { movedData } from './move.js';
import { FAN_OUT_WORKER, type JobError } from '../../machines/index.js';
import { endNodeRun, isJobNodeRun } from './jobnode-commands.js';
import { InvalidRequestError, InvalidTransitionError } from '../errors.js';
import { toIso } from '../clock.js';
import { holdsEvent as holdsEventId } from '../store/job-store.js';
import type { CancelCommand, CompleteItem, FailItem, MoveCommand, PromoteCommand, RetryCommand } from './schemas.js';
import { createRetry } from '../reactors/retrier.js';
import { eventIdFor } from '../ids.js';
import { removesCompleted } from './jobset-commands.js';
import { storedError } from './error-record.js';

export async function cancelJob(ctx: CommandContext, command: CancelCommand): Promise<Record<string, unknown>> {
  const { id, ...body } = command;
  const { record } = await transitionJob(ctx, command.job_id, id, (current, eventId) =>
    envelope(ctx, 'job.cancelled', current, eventId, { reason: command.reason ?? null }, commandMetaOf(id, body)),
  );
  return { job_id: record.jobId, status: record.state.job.value };
}

export async function retryJob(ctx: CommandContext, command: RetryCommand): Promise<Record<string, unknown>> {
  const failed = await findJob(ctx, command.job_id);
  // A retry is an ordinary job made from the failed one's context, which does not keep a fan-out.
  if (failed.state.run.context.worker === FAN_OUT_WORKER) throw new InvalidTransitionError(`job ${failed.jobId} is a fan-out job: submit it again to run it on its nodes again`, { details: { job_id: failed.jobId } });
  const { record, created } = await createRetry(ctx, failed, { manual: true });
  return { job_id: record.jobId, status: record.state.job.value, created, retry_of: failed.jobId };
}

export async function moveJob(ctx: CommandContext, command: MoveCommand): Promise<Record<string, unknown>> {
  const { id, ...body } = command;
  const { record } = await transitionJob(ctx, command.job_id, id, (current, eventId) => {
    const { priority, position } = current.state.job.context;
    const waiting = current.state.job.value === 'queued' || current.state.job.value === 'waiting';
    return envelope(ctx, 'job.moved', current, eventId, waiting ? movedData(ctx.store, current, command) : { priority, position }, commandMetaOf(id, body));
  });
  const { priority, position } = record.state.job.context;
  return { job_id: record.jobId, status: record.state.job.value, priority, position };
}

/**
 * Makes a delayed job due now: a `job.moved` that keeps its place in the order and sets its
 * run_at to the node's now. A job that is not waiting for its run_at is refused.
 */
export async function promoteJob(ctx: CommandContext, command: PromoteCommand): Promise<Record<string, unknown>> {
  const { id, ...body } = command;
  const { record } = await transitionJob(ctx, command.job_id, id, (current, eventId) => {
    const { priority, position, run_at } = current.state.job.context;
    const status = current.state.job.value;
    if ((status === 'queued' || status === 'waiting') && Date.parse(run_at) <= ctx.clock.now() && !holdsEventId(current, eventId)) {
      throw new InvalidTransitionError(`cannot promote job ${current.jobId}: it is ${status} and already due (run_at ${run_at})`, { details: { job_id: current.jobId, run_at } });
    }
    return envelope(ctx, 'job.moved', current, eventId, { priority, position, run_at: toIso(ctx.clock.now()) }, commandMetaOf(id, body));
  });
  return { job_id: record.jobId, status: record.state.job.value, run_at: record.state.job.context.run_at };
}

/** A completion must come on its job's queue: the subject names which leader decides it. */
function assertQueue(ctx: CommandContext, queue: string, jobId: string): void {
  const record = ctx.store.get(jobId);
  if (record && record.queue !== queue) throw new InvalidRequestError(`job ${jobId} is in queue ${record.queue}, not ${queue}`, { details: { job_id: jobId } });
}

/**
 * A run's end, the worker protocol's complete (no `error`) or fail (an `error`): idempotent by
 * run id. `onDecided` runs once the end is accepted and handed to the writer.
 */
export async function endRun(ctx: CommandContext, queue: string, item: CompleteItem | FailItem, onDecided?: () => void): Promise<{ job_id: string; status: string }> {
  // A fan-out job's node entry is completed by its own id, like a job (README "Fan-out jobs").
  if (isJobNodeRun(ctx, item.job_id)) return endNodeRun(ctx, queue, item, onDecided);
  assertQueue(ctx, queue, item.job_id);
  const exit = { ...(item.exit_code === undefined ? {} : { exit_code: item.exit_code }), ...(item.duration_ms === undefined ? {} : { duration_ms: item.duration_ms }) };
  const failed = 'error' in item;
  const { record } = await transitionJob(
    ctx,
    item.job_id,
    `${failed ? 'fail' : 'complete'}:${item.run_id}`,
    (current, eventId) =>
      failed
        ? envelope(ctx, 'job.failed', current, eventId, { run_id: item.run_id, reason: 'error', error: storedError(item.error as JobError), ...exit })
        : envelope(ctx, 'job.succeeded', current, eventId, { run_id: item.run_id, result: (item.result ?? null) as never, ...exit }),
    onDecided,
    // DataJoint's keep_completed false: a job set's succeeded job leaves its views in the same
    // commit, so its key is free and no view ever shows it as success.
    (current) =>
      !failed && removesCompleted(ctx, current)
        ? [envelope(ctx, 'job.removed', current, eventIdFor(`complete:${item.run_id}`, current.jobId, 1), { reason: 'completed' })]
        : [],
  );
  return { job_id: record.jobId, status: record.state.job.value };
}
