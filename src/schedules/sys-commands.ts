/**
 * The template and schedule commands, run on the `sys` partition's leader (router.run(SYS_LEASE,
 * ...)), and their read side (any node, from its folded AggregateStore).
 *
 * A commit of `sys` may hold several events of one schedule, decided in order on the folded state:
 * before a revision put, a disable or a delete, the ticks due up to now are settled first
 * (`tickSchedule`, the ticker's own run) and their `schedule.fired`/`schedule.missed` go first in
 * the same commit. So a tick due before the change is judged by the spec it was due under, and
 * a tick is never left between two specs (the ticker may be a little late; the command is not).
 * The jobs of those fires are submitted after the commit, as the ticker does.
 */
import {
  decideAggregate,
  evolveAggregate,
  isLiveStatus,
  EMPTY_PLAN,
  nextTicks,
  type AggregateEvent,
  type Plan,
  type FoldState,
  type JsonObject,
  type LastFire,
  type ScheduleContext,
  type SchedulePutData,
  type ScheduleState,
  type TemplateContext,
  type TemplatePutData,
  type TemplateState,
} from '../../machines/index.js';
import { aggregateEnvelope, assertSameCommand, commandMetaOf, type CommandContext, type CommandMeta } from '../commands/handle-command.js';
import {
  checkBackfill,
  resolveScheduleSpec,
  type ScheduleBackfillCommand,
  type ScheduleByNameCommand,
  type ScheduleDisableCommand,
  type ScheduleListCommand,
  type SchedulePutCommand,
  type TemplateArchiveCommand,
  type TemplatePutCommand,
} from '../commands/schedule-schemas.js';
import { InvalidRequestError, InvalidTransitionError, NotFoundError } from '../errors.js';
import { eventIdFor, eventIdOf, triggeredJobId } from '../ids.js';
import { SYS_LEASE } from '../nats/subjects.js';
import type { AggregateRecord } from '../store/aggregate-store.js';
import type { PartitionWriter } from '../store/partition-writer.js';
import { backfillFires, jobOfFire, tickSchedule, triggerFire, type ScheduleEventData, type ScheduledJob } from './fire.js';

/** What the sys commands need of the ticker: its start as leader, and the submit of fired jobs. */
export interface FireSink {
  /** Since when the ticker has planned without a break (its adoption of `sys`). */
  upSince(): number;
  /** Whether a fired job is still live; a job the store does not know yet counts as live. */
  isJobLive(jobId: string): boolean;
  /**
   * Fires decided but whose jobs are not submitted yet (marked at the decision, before the
   * commit): a backfill must not fire their ticks again while their submit is on its way.
   */
  readonly pending: Set<string>;
  /** Cancels a live job (cancel_other), then submits the jobs of fires just committed. */
  deliver(cancel: string | null, jobs: readonly ScheduledJob[]): Promise<void>;
}

// --- views ---------------------------------------------------------------------------------------

export interface TemplateView {
  readonly name: string;
  readonly status: string;
  readonly revision: number;
  readonly spec: TemplatePutData | null;
  readonly created_at: string;
  readonly updated_at: string;
  readonly archived_at: string | null;
}

export interface ScheduleView {
  readonly name: string;
  readonly status: string;
  readonly revision: number;
  readonly spec: SchedulePutData | null;
  readonly handled_until: string | null;
  readonly last_fired: (LastFire & { readonly job_status: string | null }) | null;
  readonly fired_count: number;
  readonly missed_count: number;
  readonly disabled_note: string | null;
  /** The next ticks (ISO UTC) while enabled; none otherwise. */
  readonly next: string[];
  readonly created_at: string;
  readonly updated_at: string;
  readonly deleted_at: string | null;
}

export function templateViewOf(name: string, state: FoldState<TemplateContext>): TemplateView {
  const c = state.context;
  return { name, status: state.value, revision: c.revision, spec: c.spec, created_at: c.created_at, updated_at: c.updated_at, archived_at: c.archived_at };
}

/** How many next ticks a view lists. */
const NEXT_IN_VIEW = 5;

export function scheduleViewOf(ctx: Pick<CommandContext, 'store' | 'clock'>, name: string, state: FoldState<ScheduleContext>): ScheduleView {
  const c = state.context;
  const from = Math.max(ctx.clock.now(), c.handled_until === null ? -Infinity : Date.parse(c.handled_until));
  const next = state.value === 'enabled' && c.spec !== null ? nextTicks(c.spec, from, NEXT_IN_VIEW) : [];
  const last = c.last_fired === null ? null : { ...c.last_fired, job_status: ctx.store.statusOf(c.last_fired.job_id) ?? null };
  return {
    name,
    status: state.value,
    revision: c.revision,
    spec: c.spec,
    handled_until: c.handled_until,
    last_fired: last,
    fired_count: c.fired_count,
    missed_count: c.missed_count,
    disabled_note: c.disabled_note,
    next,
    created_at: c.created_at,
    updated_at: c.updated_at,
    deleted_at: c.deleted_at,
  };
}

// --- one sys commit of several events, decided in order ------------------------------------------

const templateRef = (name: string) => ({ kind: 'template' as const, id: name });
const scheduleRef = (name: string) => ({ kind: 'schedule' as const, id: name });

type Candidate = { readonly type: AggregateEvent['type']; readonly data: unknown; readonly id: string; readonly meta?: CommandMeta };

interface Committed<C> {
  readonly record: AggregateRecord<C>;
  /** true when the command's event was found in the aggregate's history (a resend). */
  readonly replayed: boolean;
}

/**
 * Decides `build`'s events on the aggregate's current state, one after the other, and appends
 * them as one commit of `sys`. From the state read to append() nothing awaits (as createJob), so
 * no other decision on the aggregate comes between. `commandEventId`: the event a resend of this
 * command would find in the history (then nothing is appended).
 */
/** A commit whose fires were marked pending at their decision: if it fails, they are not pending any more. */
async function unmarkOnFailure<T>(sink: FireSink, toDeliver: ToDeliver, commit: Promise<T>): Promise<T> {
  try {
    return await commit;
  } catch (err) {
    for (const job of toDeliver.jobs) sink.pending.delete(job.job_id);
    throw err;
  }
}

async function commitSys<C>(ctx: CommandContext, ref: { kind: 'template' | 'schedule'; id: string }, commandEventId: string | null, meta: CommandMeta, build: (state: FoldState<C>) => Candidate[]): Promise<Committed<C>> {
  const writer = await ctx.writer(SYS_LEASE);
  while (writer.isBusy(ref.id, ref.kind)) await writer.settled(ref.id, ref.kind);
  const before = ctx.aggregates.get<C>(ref.kind, ref.id);
  const earlier = commandEventId === null ? undefined : before?.history.find((h) => h.id === commandEventId);
  if (before && earlier) {
    assertSameCommand(earlier.commandHash, meta);
    return { record: before, replayed: true };
  }
  const events = decideInOrder<C>(ctx, ref, build);
  if (events.length > 0) await writer.append(events);
  const record = ctx.aggregates.get<C>(ref.kind, ref.id);
  if (!record) throw new Error(`${ref.kind} ${ref.id} missing after its commit`);
  return { record, replayed: false };
}

/** `build`'s events decided one after the other on the aggregate's current (committed) state. */
function decideInOrder<C>(ctx: CommandContext, ref: { kind: 'template' | 'schedule'; id: string }, build: (state: FoldState<C>) => Candidate[]): AggregateEvent[] {
  let state = ctx.aggregates.stateOf<unknown>(ref.kind, ref.id);
  const events: AggregateEvent[] = [];
  for (const c of build(state as FoldState<C>)) {
    const event = aggregateEnvelope(ctx, c.type, ref as never, c.id, c.data as never, c.meta ?? {}) as AggregateEvent;
    // The machine's next state says whether it accepts the event; its decision, only why not (one step per event, not two).
    const next = evolveAggregate(state, event);
    if (next === null) {
      const decision = decideAggregate(state, event);
      throw new InvalidTransitionError(decision.ok ? `the ${ref.kind} machine refused ${event.type}` : decision.reason, { details: { [ref.kind]: ref.id, status: state.value } });
    }
    state = next;
    events.push(event);
  }
  return events;
}

function commandEventIdOf(commandId: string | undefined, ref: { kind: string; id: string }, index = 0): string | null {
  return commandId === undefined ? null : eventIdFor(commandId, `${ref.kind}-${ref.id}`, index);
}

function freshId(ctx: CommandContext): string {
  return eventIdOf(ctx.ids.next());
}

function templateOf(ctx: CommandContext, name: string | null): TemplateState | null {
  if (name === null) return null;
  const record = ctx.aggregates.get<TemplateContext>('template', name);
  return record === undefined ? null : (record.state as TemplateState);
}

function invalid(path: string, message: string): InvalidRequestError {
  return new InvalidRequestError(`${path}: ${message}`, { details: { issues: [{ path, message }] } });
}

// --- templates -----------------------------------------------------------------------------------

export async function putTemplate(ctx: CommandContext, command: TemplatePutCommand): Promise<TemplateView & { replayed: boolean }> {
  const ref = templateRef(command.name);
  const meta = commandMetaOf(command.id, command);
  const { record, replayed } = await commitSys<TemplateContext>(ctx, ref, commandEventIdOf(command.id, ref), meta, (state) => {
    const data: TemplatePutData = {
      name: command.name,
      revision: state.context.revision + 1,
      queue: command.queue,
      params: (command.params ?? {}) as JsonObject,
      ...(command.priority === undefined ? {} : { priority: command.priority }),
      ...(command.max_attempts === undefined ? {} : { max_attempts: command.max_attempts }),
      ...(command.backoff === undefined ? {} : { backoff: command.backoff }),
      ...(command.lease_ms === undefined ? {} : { lease_ms: command.lease_ms }),
      ...(command.description === undefined ? {} : { description: command.description }),
    };
    return [{ type: 'template.put', data, id: commandEventIdOf(command.id, ref) ?? freshId(ctx), meta }];
  });
  return { ...templateViewOf(command.name, record.state), replayed };
}

export async function archiveTemplate(ctx: CommandContext, command: TemplateArchiveCommand): Promise<TemplateView & { replayed: boolean }> {
  const ref = templateRef(command.name);
  const meta = commandMetaOf(command.id, command);
  const { record, replayed } = await commitSys<TemplateContext>(ctx, ref, commandEventIdOf(command.id, ref), meta, () => [
    { type: 'template.archived', data: {}, id: commandEventIdOf(command.id, ref) ?? freshId(ctx), meta },
  ]);
  return { ...templateViewOf(command.name, record.state), replayed };
}

// --- schedules -----------------------------------------------------------------------------------

export interface ToDeliver {
  cancel: string | null;
  jobs: ScheduledJob[];
  plan: Plan;
}

const nothingToDeliver = (): ToDeliver => ({ cancel: null, jobs: [], plan: EMPTY_PLAN });

/** The ticks due up to now (a ticker run): its events, and the fires' jobs to deliver after the commit. */
function settleDue(ctx: CommandContext, sink: FireSink, schedule: ScheduleState, toDeliver: ToDeliver, aheadMs = 0): Candidate[] {
  const result = tickSchedule({ schedule, template: templateOf(ctx, schedule.context.spec?.template ?? null), now: ctx.clock.now(), upSince: sink.upSince(), isJobLive: (id) => sink.isJobLive(id), aheadMs });
  toDeliver.cancel = result.cancel;
  toDeliver.jobs.push(...result.jobs);
  toDeliver.plan = result.plan;
  for (const job of result.jobs) sink.pending.add(job.job_id);
  return result.events.map((e: ScheduleEventData) => ({ type: e.type, data: e.data, id: freshId(ctx) }));
}

/** One ticker run on the sys leader: the schedule's due ticks as one commit; the fires' jobs are the caller's to deliver. */
export async function settleSchedule(ctx: CommandContext, sink: FireSink, name: string, aheadMs = 0): Promise<ToDeliver & { events: number }> {
  const toDeliver = nothingToDeliver();
  let events = 0;
  await unmarkOnFailure(
    sink,
    toDeliver,
    commitSys<ScheduleContext>(ctx, scheduleRef(name), null, {}, (state) => {
      const candidates = settleDue(ctx, sink, state as ScheduleState, toDeliver, aheadMs);
      events = candidates.length;
      return candidates;
    }),
  );
  return { ...toDeliver, events };
}

/** A schedule's part of a ticker pass: its events queued in the writer, and what to deliver once they are committed. */
export interface PassPart {
  readonly committed: Promise<unknown>;
  readonly toDeliver: ToDeliver;
}

/**
 * A ticker pass's part for one schedule, decided on its committed state and queued in the sys
 * writer without an await between (the writer group-commits the parts of a pass). `aheadMs`:
 * the ticker's lead (fire ahead, `tickSchedule`). Null when an event of the schedule waits in
 * the writer: its decision must wait for that commit (the caller runs settleSchedule instead).
 */
export function settleScheduleInPass(ctx: CommandContext, sink: FireSink, writer: PartitionWriter, name: string, aheadMs: number): PassPart | null {
  if (writer.isBusy(name, 'schedule')) return null;
  const toDeliver = nothingToDeliver();
  let events: AggregateEvent[];
  try {
    events = decideInOrder<ScheduleContext>(ctx, scheduleRef(name), (state) => settleDue(ctx, sink, state as ScheduleState, toDeliver, aheadMs));
  } catch (err) {
    for (const job of toDeliver.jobs) sink.pending.delete(job.job_id);
    return { committed: Promise.reject(err), toDeliver: nothingToDeliver() };
  }
  if (events.length === 0) return { committed: Promise.resolve(), toDeliver };
  return { committed: unmarkOnFailure(sink, toDeliver, writer.append(events)), toDeliver };
}

export async function putSchedule(ctx: CommandContext, sink: FireSink, command: SchedulePutCommand): Promise<ScheduleView & { replayed: boolean }> {
  const ref = scheduleRef(command.name);
  if (command.template !== undefined) {
    // A schedule must name a template that exists (an archived one is kept: its ticks are missed).
    if (templateOf(ctx, command.template) === null) await ctx.catchUp();
    const template = templateOf(ctx, command.template);
    if (template === null || template.value === 'new') throw invalid('template', `no template named ${command.template}; put it first (docket template put)`);
  }
  const meta = commandMetaOf(command.id, command);
  const toDeliver = nothingToDeliver();
  const { record, replayed } = await unmarkOnFailure(
    sink,
    toDeliver,
    commitSys<ScheduleContext>(ctx, ref, commandEventIdOf(command.id, ref), meta, (state) => {
      const settled = settleDue(ctx, sink, state as ScheduleState, toDeliver);
      // Omitted `paused`: a new (or deleted) schedule is enabled, an existing one keeps its state.
      const paused = command.paused ?? state.value === 'disabled';
      const data: SchedulePutData = { ...resolveScheduleSpec(command), name: command.name, revision: state.context.revision + 1, paused };
      return [...settled, { type: 'schedule.put', data, id: commandEventIdOf(command.id, ref) ?? freshId(ctx), meta }];
    }),
  );
  if (!replayed) await sink.deliver(toDeliver.cancel, toDeliver.jobs);
  return { ...scheduleViewOf(ctx, command.name, record.state), replayed };
}

async function changeSchedule(ctx: CommandContext, sink: FireSink, command: ScheduleByNameCommand, type: 'schedule.enabled' | 'schedule.disabled' | 'schedule.deleted', data: Record<string, unknown>): Promise<ScheduleView & { replayed: boolean }> {
  const ref = scheduleRef(command.name);
  if (ctx.aggregates.get('schedule', command.name) === undefined) await ctx.catchUp();
  if (ctx.aggregates.get('schedule', command.name) === undefined) throw new NotFoundError(`schedule ${command.name} not found`, { details: { schedule: command.name } });
  const meta = commandMetaOf(command.id, command);
  const toDeliver = nothingToDeliver();
  const { record, replayed } = await unmarkOnFailure(
    sink,
    toDeliver,
    commitSys<ScheduleContext>(ctx, ref, commandEventIdOf(command.id, ref), meta, (state) => {
      // Enabling settles nothing: a disabled schedule has no due ticks to fire (they are missed as paused by the next run).
      const settled = type === 'schedule.enabled' ? [] : settleDue(ctx, sink, state as ScheduleState, toDeliver);
      return [...settled, { type, data, id: commandEventIdOf(command.id, ref) ?? freshId(ctx), meta }];
    }),
  );
  if (!replayed) await sink.deliver(toDeliver.cancel, toDeliver.jobs);
  return { ...scheduleViewOf(ctx, command.name, record.state), replayed };
}

export const enableSchedule = (ctx: CommandContext, sink: FireSink, command: ScheduleByNameCommand) => changeSchedule(ctx, sink, command, 'schedule.enabled', {});
export const disableSchedule = (ctx: CommandContext, sink: FireSink, command: ScheduleDisableCommand) => changeSchedule(ctx, sink, command, 'schedule.disabled', { note: command.note ?? null });
export const deleteSchedule = (ctx: CommandContext, sink: FireSink, command: ScheduleByNameCommand) => changeSchedule(ctx, sink, command, 'schedule.deleted', {});

function existingSchedule(ctx: CommandContext, name: string): AggregateRecord<ScheduleContext> {
  const record = ctx.aggregates.get<ScheduleContext>('schedule', name);
  if (!record) throw new NotFoundError(`schedule ${name} not found`, { details: { schedule: name } });
  return record;
}

/** docket.cmd.schedule.trigger: one fire now, outside the cron. A resend (same id) fires once. */
export async function triggerSchedule(ctx: CommandContext, sink: FireSink, command: ScheduleByNameCommand): Promise<{ schedule: string; tick: string; job_id: string; replayed: boolean }> {
  const ref = scheduleRef(command.name);
  if (ctx.aggregates.get('schedule', command.name) === undefined) await ctx.catchUp();
  existingSchedule(ctx, command.name);
  const meta = commandMetaOf(command.id, command);
  // The job id derives from the command id (a random one without): a resent trigger finds its job.
  const triggerId = command.id ?? ctx.ids.next();
  let fired: { tick: string; job: ScheduledJob } | null = null;
  const { record, replayed } = await commitSys<ScheduleContext>(ctx, ref, commandEventIdOf(command.id, ref), meta, (state) => {
    const schedule = state as ScheduleState;
    if (schedule.value !== 'enabled') throw new InvalidTransitionError(`cannot trigger schedule ${command.name}: it is ${schedule.value}`, { details: { schedule: command.name, status: schedule.value } });
    const fire = triggerFire(schedule, templateOf(ctx, schedule.context.spec?.template ?? null), triggerId, ctx.clock.now());
    if (fire === null) throw new InvalidTransitionError(`cannot trigger schedule ${command.name}: its template ${schedule.context.spec?.template ?? ''} is archived`, { details: { schedule: command.name } });
    fired = { tick: fire.job.tick, job: fire.job };
    return [{ type: fire.event.type, data: fire.event.data, id: commandEventIdOf(command.id, ref) ?? freshId(ctx), meta }];
  });
  if (replayed || fired === null) {
    // A resend: the first fire's job, submitted again (harmless: its id is derived) in case that submit was lost.
    const jobId = triggeredJobId(command.name, triggerId);
    const last = record.state.context.last_fired;
    const tick = last !== null && last.job_id === jobId ? last.tick : null;
    const job = tick === null ? null : jobOfFire(record.state as ScheduleState, templateOf(ctx, record.state.context.spec?.template ?? null), tick, jobId, 'manual');
    if (job !== null && !ctx.store.has(jobId)) await sink.deliver(null, [job]);
    return { schedule: command.name, tick: tick ?? '', job_id: jobId, replayed: true };
  }
  const { tick, job } = fired as { tick: string; job: ScheduledJob };
  await sink.deliver(null, [job]);
  return { schedule: command.name, tick, job_id: job.job_id, replayed: false };
}

/** docket.cmd.schedule.backfill: a fire per tick of [from, to] without a job yet; ticks the cron has not reached are left to it. */
export async function backfillSchedule(ctx: CommandContext, sink: FireSink, command: ScheduleBackfillCommand): Promise<{ schedule: string; fired: string[]; skipped: string[]; job_ids: string[]; replayed: boolean }> {
  const ref = scheduleRef(command.name);
  await ctx.catchUp();
  const current = existingSchedule(ctx, command.name);
  if (current.state.context.spec === null) throw new NotFoundError(`schedule ${command.name} not found`, { details: { schedule: command.name } });
  const ticks = checkBackfill(current.state.context.spec, command, ctx.clock.now());
  const meta = commandMetaOf(command.id, command);
  const toDeliver = nothingToDeliver();
  let fired: string[] = [];
  let skipped: string[] = [];
  const { replayed } = await unmarkOnFailure(sink, toDeliver, commitSys<ScheduleContext>(ctx, ref, commandEventIdOf(command.id, ref), meta, (state) => {
    const schedule = state as ScheduleState;
    if (schedule.value !== 'enabled') throw new InvalidTransitionError(`cannot backfill schedule ${command.name}: it is ${schedule.value}`, { details: { schedule: command.name, status: schedule.value } });
    // Ticks due up to now first, so every tick of the range the cron has passed is handled.
    const settled = settleDue(ctx, sink, schedule, toDeliver);
    let after = schedule;
    for (const e of settled) after = evolveAggregate(after, aggregateEnvelope(ctx, e.type, ref, e.id, e.data as never) as AggregateEvent)! as ScheduleState;
    const handledUntil = after.context.handled_until === null ? -Infinity : Date.parse(after.context.handled_until);
    const past = ticks.filter((t) => Date.parse(t) <= handledUntil);
    const result = backfillFires(after, templateOf(ctx, after.context.spec?.template ?? null), past, (jobId) => sink.pending.has(jobId) || ctx.store.has(jobId));
    for (const job of result.jobs) sink.pending.add(job.job_id);
    fired = result.events.map((e) => ('tick' in e.data ? e.data.tick : ''));
    skipped = [...result.skipped, ...ticks.filter((t) => Date.parse(t) > handledUntil)];
    toDeliver.jobs.push(...result.jobs);
    return [...settled, ...result.events.map((e, i) => ({ type: e.type, data: e.data, id: commandEventIdOf(command.id, ref, i) ?? freshId(ctx), meta }))];
  }));
  if (replayed) return { schedule: command.name, fired: [], skipped: ticks, job_ids: [], replayed: true };
  await sink.deliver(toDeliver.cancel, toDeliver.jobs);
  return { schedule: command.name, fired, skipped, job_ids: toDeliver.jobs.filter((j) => j.trigger === 'backfill').map((j) => j.job_id), replayed: false };
}

// --- reads ---------------------------------------------------------------------------------------

export async function getTemplate(ctx: CommandContext, name: string): Promise<TemplateView> {
  if (ctx.aggregates.get('template', name) === undefined) await ctx.catchUp();
  const record = ctx.aggregates.get<TemplateContext>('template', name);
  if (!record) throw new NotFoundError(`template ${name} not found`, { details: { template: name } });
  return templateViewOf(name, record.state);
}

export function listTemplates(ctx: CommandContext): TemplateView[] {
  return [...ctx.aggregates.values()].filter((r) => r.kind === 'template').map((r) => templateViewOf(r.id, r.state as FoldState<TemplateContext>)).sort((a, b) => a.name.localeCompare(b.name));
}

export async function getSchedule(ctx: CommandContext, name: string): Promise<ScheduleView> {
  if (ctx.aggregates.get('schedule', name) === undefined) await ctx.catchUp();
  const record = ctx.aggregates.get<ScheduleContext>('schedule', name);
  if (!record) throw new NotFoundError(`schedule ${name} not found`, { details: { schedule: name } });
  return scheduleViewOf(ctx, name, record.state);
}

export function listSchedules(ctx: CommandContext, command: ScheduleListCommand): ScheduleView[] {
  return [...ctx.aggregates.values()]
    .filter((r) => r.kind === 'schedule' && (command.status === undefined ? r.state.value !== 'deleted' : r.state.value === command.status))
    .map((r) => scheduleViewOf(ctx, r.id, r.state as FoldState<ScheduleContext>))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** Whether a job counts as live for the overlap policy: waiting, queued or running, or not folded yet. */
export function isFiredJobLive(ctx: Pick<CommandContext, 'store'>, jobId: string): boolean {
  const status = ctx.store.statusOf(jobId);
  return status === undefined || isLiveStatus(status);
}
