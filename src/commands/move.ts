/**
 * docket.cmd.move: reorders a queued job. `priority` alone changes its priority; `before` or
 * `after` another queued job of the same queue takes that job's priority and a position between
 * it and its neighbour. Positions are numbers; unmoved jobs sit at their stream sequence, so
 * there is always room between two neighbours.
 */
import type { JobMovedData } from '../../machines/index.js';
import { InvalidRequestError, InvalidTransitionError, NotFoundError } from '../errors.js';
import { compareOrder, orderKeyOf, type OrderKey } from '../projections/queue-order.js';
import type { JobRecord, JobStore } from '../store/job-store.js';
import type { MoveCommand } from './schemas.js';

/** The neighbours of `anchor` among the queued jobs of its queue and priority, in queue order. */
function neighbours(store: JobStore, anchor: JobRecord, moving: string): { prev: OrderKey | undefined; next: OrderKey | undefined } {
  const key = orderKeyOf(anchor);
  let prev: OrderKey | undefined;
  let next: OrderKey | undefined;
  for (const record of store.values()) {
    if (record.queue !== anchor.queue || record.jobId === moving || record.jobId === anchor.jobId) continue;
    if (record.state.job.value !== 'queued' || record.state.job.context.priority !== key.priority) continue;
    const other = orderKeyOf(record);
    const c = compareOrder(other, key);
    if (c < 0 && (!prev || compareOrder(other, prev) > 0)) prev = other;
    if (c > 0 && (!next || compareOrder(other, next) < 0)) next = other;
  }
  return { prev, next };
}

/** The moved job's new (priority, position), decided from the current queue order. */
export function movedData(store: JobStore, job: JobRecord, command: MoveCommand): JobMovedData {
  const anchorId = command.before ?? command.after;
  if (anchorId === undefined) return { priority: command.priority ?? job.state.job.context.priority, position: job.state.job.context.position };
  if (anchorId === job.jobId) throw new InvalidRequestError('a job cannot be moved relative to itself');
  const anchor = store.get(anchorId);
  if (!anchor) throw new NotFoundError(`job ${anchorId} not found`, { details: { job_id: anchorId } });
  if (anchor.queue !== job.queue) throw new InvalidRequestError(`job ${anchorId} is in queue ${anchor.queue}, not ${job.queue}`);
  if (anchor.state.job.value !== 'queued') throw new InvalidTransitionError(`job ${anchorId} is ${anchor.state.job.value}, not queued`);
  const key = orderKeyOf(anchor);
  const { prev, next } = neighbours(store, anchor, job.jobId);
  const position =
    command.before !== undefined
      ? prev === undefined ? key.position - 1 : (prev.position + key.position) / 2
      : next === undefined ? key.position + 1 : (key.position + next.position) / 2;
  return { priority: key.priority, position };
}
