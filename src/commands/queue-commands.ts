/**
 * The queue aggregate's commands, run on the queue's leader: pause, resume, and the flow-control
 * settings (queue.set). Each is one event on the aggregate `queue/<name>`; the dispatcher reads
 * the folded state (src/dispatch/flow-gate.ts).
 */
import { NO_QUEUE_SETTINGS, type QueueContext, type QueueSettings, type QueueSettingsChange } from '../../machines/index.js';
import { NotFoundError } from '../errors.js';
import type { Mutable } from '../mutable.js';
import type { AggregateRecord } from '../store/aggregate-store.js';
import { aggregateEnvelope, commandMetaOf, transitionAggregate, type CommandContext } from './handle-command.js';
import type { PauseCommand, QueueSetCommand, ResumeCommand } from './queue-schemas.js';

/** What a reply and `docket queue show` say of a queue's own state. */
export type QueueView = {
  readonly queue: string;
  readonly status: 'active' | 'paused';
  readonly paused: { readonly reason: string | null; readonly at: string; readonly by: string | null } | null;
  readonly settings: QueueSettings;
};

export function queueViewOf(queue: string, record: AggregateRecord<QueueContext> | undefined): QueueView {
  const context = record?.state.context;
  const paused = record?.state.value === 'paused' && context ? { reason: context.paused_reason, at: context.paused_at ?? '', by: context.paused_by } : null;
  return { queue, status: paused ? 'paused' : 'active', paused, settings: context?.settings ?? NO_QUEUE_SETTINGS };
}

/**
 * A queue is known once a job was submitted to it or it has state of its own. Queue commands on
 * an unknown queue are refused unless they say `create`: a typo must not configure a new queue.
 */
export function assertKnownQueue(known: boolean, queue: string, create: boolean | undefined): void {
  if (known || create === true) return;
  throw new NotFoundError(`queue ${queue} has no jobs and no settings; pass create: true (--create) to configure it before its first job`, { details: { queue } });
}

const queueRef = (queue: string) => ({ kind: 'queue' as const, id: queue, queue });

function metaOf(command: { id?: string | undefined; actor?: string | undefined }): { command_id?: string; command_hash?: string; actor?: string } {
  const meta = commandMetaOf(command.id, command);
  return command.actor === undefined ? meta : { ...meta, actor: command.actor };
}

export async function pauseQueue(ctx: CommandContext, command: PauseCommand): Promise<QueueView & { replayed: boolean }> {
  const { record, replayed } = await transitionAggregate<QueueContext>(ctx, queueRef(command.queue), command.id, (_state, eventId) =>
    aggregateEnvelope(ctx, 'queue.paused', queueRef(command.queue), eventId, { reason: command.reason ?? null }, metaOf(command)),
  );
  return { ...queueViewOf(command.queue, record), replayed };
}

export async function resumeQueue(ctx: CommandContext, command: ResumeCommand): Promise<QueueView & { replayed: boolean }> {
  const { record, replayed } = await transitionAggregate<QueueContext>(ctx, queueRef(command.queue), command.id, (_state, eventId) =>
    aggregateEnvelope(ctx, 'queue.resumed', queueRef(command.queue), eventId, {}, metaOf(command)),
  );
  return { ...queueViewOf(command.queue, record), replayed };
}

export async function setQueue(ctx: CommandContext, command: QueueSetCommand): Promise<QueueView & { replayed: boolean }> {
  const change: Mutable<QueueSettingsChange> = {};
  if (command.concurrency !== undefined) change.concurrency = command.concurrency;
  if (command.rate !== undefined) change.rate = command.rate;
  if (command.key_concurrency !== undefined) change.key_concurrency = command.key_concurrency;
  if (command.key_rate !== undefined) change.key_rate = command.key_rate;
  const { record, replayed } = await transitionAggregate<QueueContext>(ctx, queueRef(command.queue), command.id, (_state, eventId) =>
    aggregateEnvelope(ctx, 'queue.settings_changed', queueRef(command.queue), eventId, change, metaOf(command)),
  );
  return { ...queueViewOf(command.queue, record), replayed };
}
