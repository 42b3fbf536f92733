/**
 * Fan-out jobs (seed 004), on the leader of the job's queue: the submit (the job, its own run and
 * one job node per worker node in one commit), a worker's claim of its node's entry, and a run's
 * end. Each is decided by the machines (Job + JobRun for the job, JobNode for the nodes) through
 * the write door. The job's end from its nodes is the coordinator's (src/reactors/fan-out.ts).
 */
import { hostname } from 'node:os';
import {
  decideAggregate,
  decideJob,
  defaultQuorum,
  DEFAULT_QUORUM_TIMEOUT_MS,
  evolveAggregate,
  evolveJob,
  FAN_OUT_WORKER,
  INITIAL_JOB_STATE,
  nodeRunFailure,
  type AggregateEvent,
  type FanOutSpec,
  type FoldState,
  type JobError,
  type JobEvent,
  type JobNodeContext,
  type JobNodeStatus,
} from '../../machines/index.js';
import { toIso } from '../clock.js';
import { InvalidRequestError, InvalidTransitionError, NotFoundError, StaleRunError } from '../errors.js';
import { eventIdOf, isJobNodeIdShape, jobNodeId } from '../ids.js';
import { aggregateEnvelope, assertSameCommand, envelope, jobOfSubmitEvent, transitionAggregate, type CommandContext, type CommandMeta } from './handle-command.js';
import { JobDefaults } from './limits.js';
import type { ClaimCommand, ClaimedJob, CompleteItem, FailItem, JobSpec } from './schemas.js';
import { storedError } from './error-record.js';
import { submittedEvent, type SubmitItemResult } from './submit.js';
import type { MadeFrom } from '../schedules/template-submit.js';

/** The lease of a fan-out job's own run: the leader holds it while the nodes run, so no lease lapses it (src/reactors/leases.ts skips it). */
const FAN_OUT_RUN_LEASE_MS = 1;

const nodeRef = (queue: string, id: string) => ({ kind: 'jobnode' as const, id, queue });

/** The nodes a fan-out submit runs on: as named, or the queue's live worker nodes; refused when there are none. */
function chooseNodes(ctx: CommandContext, spec: JobSpec): string[] {
  const named = spec.fan_out?.nodes;
  if (named !== undefined) {
    const unique = [...new Set(named)];
    if (unique.length !== named.length) throw new InvalidRequestError('fan_out.nodes names a node twice', { details: { queue: spec.queue } });
    return unique;
  }
  const live = ctx.jobNodes?.liveNodes(spec.queue, ctx.clock.now()) ?? [];
  if (live.length === 0) {
    throw new InvalidRequestError(`no worker node has claimed or heartbeat on queue ${spec.queue} in the last 30 s: start workers (with --node) or name fan_out.nodes`, { details: { queue: spec.queue, reason: 'no_nodes' } });
  }
  return live;
}

/** What a fan-out submit may not combine with: each would need a rule of its own for the job's run. */
function assertPlainFanOut(spec: JobSpec): void {
  const refused = (['key', 'depends_on', 'delay_ms', 'run_at'] as const).filter((field) => spec[field] !== undefined);
  if (refused.length > 0) throw new InvalidRequestError(`a fan-out job takes no ${refused.join(', ')} (it starts on its nodes at once)`, { details: { queue: spec.queue, fields: refused } });
}

/**
 * Submits a fan-out job: job.submitted (with fan_out: the chosen nodes), its own run's job.claimed
 * (worker FAN_OUT_WORKER: the job is `running` while its nodes run) and one jobnode.created per
 * node, decided in order and appended as one commit. A resend finds its submit and answers with it.
 */
export async function submitFanOut(ctx: CommandContext, spec: JobSpec, jobId: string, eventId: string, meta: CommandMeta, madeFrom: MadeFrom | null): Promise<SubmitItemResult> {
  assertPlainFanOut(spec);
  const writer = await ctx.writer(spec.queue);
  while (writer.isBusy(jobId)) await writer.settled(jobId);
  const found = jobOfSubmitEvent(ctx, eventId);
  const mine = found instanceof Promise ? await found : found;
  if (mine) {
    assertSameCommand(mine.commandHash, meta);
    return { job_id: mine.jobId, status: mine.state.job.value, created: true };
  }
  if (ctx.store.has(jobId)) throw new InvalidTransitionError(`job ${jobId} exists already; send a new command id`, { details: { job_id: jobId } });
  const nodes = chooseNodes(ctx, spec);
  const quorum = spec.fan_out?.quorum ?? defaultQuorum(nodes.length);
  if (quorum > nodes.length) throw new InvalidRequestError(`fan_out.quorum ${quorum} exceeds the ${nodes.length} node(s) chosen (${nodes.join(', ')})`, { details: { queue: spec.queue, nodes } });
  const fanOut: FanOutSpec = { nodes, quorum, quorum_timeout_ms: spec.fan_out?.quorum_timeout_ms ?? DEFAULT_QUORUM_TIMEOUT_MS };

  const plain = submittedEvent(ctx, spec, jobId, eventId, meta, false, madeFrom);
  const submitted = { ...plain, data: { ...plain.data, fan_out: fanOut } };
  const job = { queue: spec.queue, jobId };
  const claimed = envelope(ctx, 'job.claimed', job, eventIdOf(ctx.ids.next()), { run_id: ctx.ids.next(), worker: FAN_OUT_WORKER, host: hostname(), pid: 0, version: 'fan-out', lease_ms: FAN_OUT_RUN_LEASE_MS }, {}, submitted.time);
  let state = INITIAL_JOB_STATE;
  for (const event of [submitted, claimed] as JobEvent[]) {
    const decision = decideJob(state, event);
    if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { job_id: jobId } });
    state = evolveJob(state, event)!;
  }
  const { max_attempts, backoff } = submitted.data;
  const created = nodes.map((node) => {
    const id = jobNodeId(jobId, node);
    const event = aggregateEnvelope(ctx, 'jobnode.created', nodeRef(spec.queue, id), eventIdOf(ctx.ids.next()), { job_id: jobId, node, of: nodes.length, quorum, quorum_timeout_ms: fanOut.quorum_timeout_ms, max_attempts, backoff });
    const decision = decideAggregate(ctx.aggregates.stateOf('jobnode', id), event);
    if (!decision.ok) throw new InvalidTransitionError(decision.reason, { details: { job_id: jobId, node } });
    return event;
  });
  await writer.append([submitted, claimed, ...created]);
  const record = ctx.store.get(jobId);
  return { job_id: jobId, status: record?.state.job.value ?? 'running', created: true };
}

/** A fan-out job's node entry, with the ids a reply names. */
export interface JobNodeView {
  readonly node: string;
  readonly jobnode_id: string;
  readonly status: JobNodeStatus;
  readonly attempt: number;
  readonly max_attempts: number;
  readonly run_id: string | null;
  readonly worker: string | null;
  readonly started_at: string | null;
  readonly finished_at: string | null;
  readonly retry_at: string | null;
  readonly result: unknown;
  readonly error: JobError | null;
  readonly reason: string | null;
}

export function jobNodeViewOf(id: string, state: FoldState<JobNodeContext>): JobNodeView {
  const c = state.context;
  return {
    node: c.node,
    jobnode_id: id,
    status: state.value as JobNodeStatus,
    attempt: c.attempt,
    max_attempts: c.max_attempts,
    run_id: c.run_id,
    worker: c.worker,
    started_at: c.started_at,
    finished_at: c.finished_at,
    retry_at: c.retry_at,
    result: c.result,
    error: c.error,
    reason: c.reason,
  };
}

/** A fan-out job's nodes as `get` shows them. */
export interface FanOutView {
  readonly quorum: number;
  readonly nodes: readonly JobNodeView[];
}

/** The fan-out of a job as `get` shows it: its quorum and each node; null for an ordinary job. */
export function fanOutViewOf(ctx: Pick<CommandContext, 'jobNodes'>, jobId: string): FanOutView | null {
  const entries = ctx.jobNodes?.nodesOf(jobId) ?? [];
  if (entries.length === 0) return null;
  return { quorum: entries[0]!.state.context.quorum, nodes: entries.map((e) => jobNodeViewOf(e.id, e.state)) };
}

/**
 * Claims one queued job node for a worker of its node: `jobnode.claimed` (the position is the
 * run's fencing token). null when it was taken or ended meanwhile (the machine refuses).
 */
export async function claimJobNode(ctx: CommandContext, queue: string, id: string, request: ClaimCommand): Promise<ClaimedJob | null> {
  const runId = ctx.ids.next();
  const leaseMs = request.lease_ms ?? JobDefaults.leaseMs;
  try {
    const { record, position } = await transitionAggregate<JobNodeContext>(ctx, nodeRef(queue, id), undefined, (_state, eventId) =>
      aggregateEnvelope(ctx, 'jobnode.claimed', nodeRef(queue, id), eventId, { run_id: runId, worker: request.worker, host: request.host ?? hostname(), pid: request.pid ?? 0, lease_ms: leaseMs }),
    );
    const c = record.state.context;
    const job = ctx.store.get(c.job_id)?.state.job.context;
    const nodes = ctx.jobNodes?.nodesOf(c.job_id).map((e) => e.state.context.node) ?? [c.node];
    return {
      job_id: id,
      run_id: runId,
      queue,
      key: job?.key ?? null,
      params: job?.params ?? {},
      attempt: c.attempt,
      max_attempts: c.max_attempts,
      lease_ms: leaseMs,
      fencing_token: position,
      fan_out: { job_id: c.job_id, node: c.node, nodes, quorum: c.quorum },
    };
  } catch (err) {
    if (err instanceof InvalidTransitionError) return null;
    throw err;
  }
}

/** Whether a completion names a job node (rather than a job): the id's shape, then the store. */
export function isJobNodeRun(ctx: Pick<CommandContext, 'aggregates'>, id: string): boolean {
  return isJobNodeIdShape(id) && ctx.aggregates.get('jobnode', id) !== undefined;
}

/**
 * A job node's run ends (the worker protocol's complete or fail, by run id): completed, or on a
 * failure retried with the job's backoff while attempts are left (`nodeRunFailure`), else failed.
 * Idempotent by run id; a run that no longer holds the node is `stale_run`.
 */
export async function endNodeRun(ctx: CommandContext, queue: string, item: CompleteItem | FailItem, onDecided?: () => void): Promise<{ job_id: string; status: string }> {
  const record = ctx.aggregates.get<JobNodeContext>('jobnode', item.job_id);
  if (record === undefined) throw new NotFoundError(`job node ${item.job_id} not found`, { details: { job_id: item.job_id } });
  if (record.queue !== queue) throw new InvalidRequestError(`job node ${item.job_id} is in queue ${String(record.queue)}, not ${queue}`, { details: { job_id: item.job_id } });
  const failed = 'error' in item;
  const ref = nodeRef(queue, item.job_id);
  const done = await endNodeRunAs(ctx, ref, `${failed ? 'fail' : 'complete'}:${item.run_id}`, item.run_id, (state, eventId) => {
    if (!failed) return aggregateEnvelope(ctx, 'jobnode.completed', ref, eventId, { run_id: item.run_id, result: (item.result ?? null) as never, ...(item.duration_ms === undefined ? {} : { duration_ms: item.duration_ms }) });
    return nodeFailureEvent(ctx, ref, eventId, state, item.run_id, 'error', storedError(item.error as JobError));
  });
  onDecided?.();
  return done;
}

/** A node run's failure event: retrying (with retry_at) or failed, by `nodeRunFailure`. */
export function nodeFailureEvent(ctx: CommandContext, ref: ReturnType<typeof nodeRef>, eventId: string, state: FoldState<JobNodeContext>, runId: string, reason: 'error' | 'lease_expired' | 'crash_recovery', error: JobError | null): AggregateEvent {
  const outcome = nodeRunFailure(state.context, ref.id, ctx.clock.now(), error);
  return outcome.type === 'jobnode.retrying'
    ? aggregateEnvelope(ctx, 'jobnode.retrying', ref, eventId, { run_id: runId, reason, error, retry_at: toIso(outcome.retry_at_ms) })
    : aggregateEnvelope(ctx, 'jobnode.failed', ref, eventId, { run_id: runId, reason, error });
}

/** Decides a run's end on a job node; a run that does not hold the node is `stale_run`. */
async function endNodeRunAs(ctx: CommandContext, ref: ReturnType<typeof nodeRef>, commandId: string, runId: string, build: (state: FoldState<JobNodeContext>, eventId: string) => AggregateEvent): Promise<{ job_id: string; status: string }> {
  try {
    const { record } = await transitionAggregate<JobNodeContext>(ctx, ref, commandId, build);
    return { job_id: ref.id, status: record.state.value };
  } catch (err) {
    const state = ctx.aggregates.stateOf<JobNodeContext>('jobnode', ref.id);
    if (err instanceof InvalidTransitionError && !(state.value === 'running' && state.context.run_id === runId)) {
      throw new StaleRunError(`run ${runId} does not hold job node ${ref.id} (it is ${state.value})`, { details: { job_id: ref.id, status: state.value } });
    }
    throw err;
  }
}

/** Lapses a node run's lease (src/reactors/fan-out.ts): retried or failed like a worker's failure. */
export async function lapseNodeRun(ctx: CommandContext, queue: string, id: string, runId: string, reason: 'lease_expired' | 'crash_recovery', leaseMs: number): Promise<void> {
  const ref = nodeRef(queue, id);
  await endNodeRunAs(ctx, ref, `lapse:${runId}`, runId, (state, eventId) =>
    nodeFailureEvent(ctx, ref, eventId, state, runId, reason, { message: reason === 'crash_recovery' ? 'no heartbeat after a restart' : `no heartbeat for ${leaseMs} ms` }),
  );
}

/** Decides events one after another on the states the ones before leave (a node's end and the job's, in one commit). */
export function decideAll(ctx: CommandContext, jobState: Parameters<typeof decideJob>[0], events: readonly (JobEvent | AggregateEvent)[]): boolean {
  let job = jobState;
  const nodes = new Map<string, FoldState<unknown>>();
  for (const event of events) {
    if (event.aggregate.kind === 'job') {
      if (!decideJob(job, event as JobEvent).ok) return false;
      job = evolveJob(job, event as JobEvent)!;
    } else {
      const before = nodes.get(event.aggregate.id) ?? ctx.aggregates.stateOf(event.aggregate.kind as 'jobnode', event.aggregate.id);
      if (!decideAggregate(before, event as AggregateEvent).ok) return false;
      nodes.set(event.aggregate.id, evolveAggregate(before, event as AggregateEvent)!);
    }
  }
  return true;
}
