/**
 * The bodies of the job commands that write (cancel, retry, move), run on the leader of the
 * job's queue. Each is decided by the job's machines through the write door.
 */
import { envelope, findJob, transitionJob, type CommandContext } from './handle-command.js';
import { movedData } from './move.js';
import type { CancelCommand, MoveCommand, RetryCommand } from './schemas.js';
import { createRetry } from '../reactors/retrier.js';

export async function cancelJob(ctx: CommandContext, command: CancelCommand): Promise<Record<string, unknown>> {
  const { record } = await transitionJob(ctx, command.job_id, command.id, (current, eventId) =>
    envelope(ctx, 'job.cancelled', current, eventId, { reason: command.reason ?? null }),
  );
  return { job_id: record.jobId, status: record.state.job.value };
}

export async function retryJob(ctx: CommandContext, command: RetryCommand): Promise<Record<string, unknown>> {
  const failed = await findJob(ctx, command.job_id);
  const { record, created } = await createRetry(ctx, failed, { manual: true });
  return { job_id: record.jobId, status: record.state.job.value, created, retry_of: failed.jobId };
}

export async function moveJob(ctx: CommandContext, command: MoveCommand): Promise<Record<string, unknown>> {
  const { record } = await transitionJob(ctx, command.job_id, command.id, (current, eventId) => {
    const { priority, position } = current.state.job.context;
    const waiting = current.state.job.value === 'queued' || current.state.job.value === 'waiting';
    return envelope(ctx, 'job.moved', current, eventId, waiting ? movedData(ctx.store, current, command) : { priority, position });
  });
  const { priority, position } = record.state.job.context;
  return { job_id: record.jobId, status: record.state.job.value, priority, position };
}
