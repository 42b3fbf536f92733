/**
 * The composition root of one docket process: connect, ensure the stream, restore the
 * checkpoint, fold the tail of the log through the machines, then serve commands while following
 * the stream. `close()` stops taking commands, answers those in flight, writes a checkpoint.
 */
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { systemClock, type Clock } from './clock.js';
import { registerBulkCommands } from './commands/bulk-commands.js';
import { registerJobSetCommands } from './commands/jobset-commands.js';
import { CommandService } from './commands/command-service.js';
import { findJob, type CommandContext } from './commands/handle-command.js';
import { cancelJob, moveJob, promoteJob, retryJob } from './commands/job-commands.js';
import { getJobOrEvicted, listJobs, progressOf, type QueryContext } from './commands/queries.js';
import { replyBudget } from './commands/reply.js';
import { flowSummary, holdOf, listReservations, showQueue, type FlowViewContext } from './commands/flow-queries.js';
import { assertKnownQueue, pauseQueue, resumeQueue, setQueue } from './commands/queue-commands.js';
import { pauseSchema, queueSetSchema, queueShowSchema, releaseSchema, renewSchema, reservationsSchema, reserveSchema, resumeSchema, type PauseCommand, type QueueSetCommand, type ReleaseCommand, type RenewCommand, type ReserveCommand, type ResumeCommand } from './commands/queue-schemas.js';
import { queueOfReservation, release, renew, reserve } from './commands/reservation-commands.js';
import { FlowGate } from './dispatch/flow-gate.js';
import { FlowCounts } from './projections/flow.js';
import { ReservationExpirer } from './reactors/reservations.js';
import { DependencyReleaser } from './reactors/dependencies.js';
import { GroupCoordinator } from './reactors/group-coordinator.js';
import { cancelGroup, createGroup, decideGroupMember, getGroup, listGroups, submitGroupMember, type GroupMemberSubmit } from './commands/group-commands.js';
import { groupCancelSchema, groupCreateSchema, groupGetSchema, groupListSchema, type GroupCreateCommand } from './commands/group-schemas.js';
import type { QueueContext } from '../machines/index.js';
import { cancelSchema, getSchema, listSchema, moveSchema, progressSchema, promoteSchema, retrySchema, type CancelCommand, type MoveCommand, type PromoteCommand, type RetryCommand } from './commands/schemas.js';
import { DEFAULT_LEADERSHIP_LEASE_MS, Leadership } from './cluster/leadership.js';
import { nodeIdentity } from './cluster/node-identity.js';
import { PartitionRouter } from './cluster/partition-router.js';
import { QueueDispatcher } from './dispatch/dispatcher.js';
import { WorkService, type LocalWork } from './dispatch/work-service.js';
import type { LocalLive } from './client/live.js';
import { InvalidRequestError } from './errors.js';
import { LeaseKeeper } from './reactors/leases.js';
import { FanOutCoordinator } from './reactors/fan-out.js';
import { JobNodeIndex } from './projections/job-nodes.js';
import { Retrier } from './reactors/retrier.js';
import { DEFAULT_FINISHED_RETENTION_MS, Evictor } from './reactors/evictor.js';
import { commitReader } from './store/evicted-jobs.js';
import { submitCommand, submitPart, type SubmitItemReply, type SubmitPart } from './commands/submit.js';
import { validate, validateSubmit } from './commands/validate.js';
import { randomIds, type IdSource } from './ids.js';
import { silentLogger, type Logger } from './logger.js';
import { connectNats, watchConnection } from './nats/connection.js';
import { ensureStream } from './nats/streams.js';
import { STREAM, SYS_LEASE, toNodeToken, type LiveEventMode } from './nats/subjects.js';
import type { SysReactor } from './reactors/sys-reactor.js';
import { KeyIndex } from './projections/key-index.js';
import { Progress } from './projections/progress.js';
import { QueueIndex } from './projections/queue-index.js';
import { QueueOrder } from './projections/queue-order.js';
import { CheckpointFile } from './store/checkpoints.js';
import { Outbox } from './nats/outbox.js';
import { EventStore } from './store/event-store.js';
import { Kernel } from './store/kernel.js';
import type { JobStore } from './store/job-store.js';
import type { AggregateStore } from './store/aggregate-store.js';
import { LogTail, type LogTailOptions } from './store/log-tail.js';
import { PartitionWriters } from './store/partition-writers.js';
import { LocalLiveCommits } from './store/local-live.js';
import { withinMs } from './timing.js';
import { previewSchedule } from './schedules/preview.js';
import { registerScheduleCommands } from './schedules/wiring.js';
import { fillTemplateQueues } from './schedules/template-submit.js';

/** The longest a command waits for this node to fold what other nodes appended. */
const CATCH_UP_MAX_MS = 2_000;

export interface DocketOptions {
  /** NATS server URL(s). Ignored when `nc` is given. @defaultValue 'nats://127.0.0.1:4222' */
  readonly servers?: string | string[];
  /** A connection to use; the node does not close it. */
  readonly nc?: NatsConnection;
  /**
   * With `nc`: a second connection, opened with `noEcho: true`, for this node's appends (the
   * node does not close it either). On it the log tail hears only other writers, so it can stop
   * following the stream while this node is the only one (LogTail). Without it a node given `nc`
   * appends on `nc` and follows the stream all the time. One per node: two nodes publishing on
   * one connection would not hear each other. A node that opens its own connection opens this
   * one too.
   */
  readonly appendNc?: NatsConnection;
  /** Directory for checkpoints. Without one the node folds the whole log on every start. */
  readonly dataDir?: string;
  /**
   * Write a checkpoint after this many events folded since the last (and on close): a restart
   * after a crash folds at most about this many. Lower restarts faster after a crash and writes
   * checkpoints more often (each one the jobs changed since the last). @defaultValue 1000000
   */
  readonly checkpointEveryEvents?: number;
  readonly logger?: Logger;
  readonly clock?: Clock;
  readonly ids?: IdSource;
  /** This node's name in event meta and leases. @defaultValue the one kept in `dataDir` (src/cluster/node-identity.ts), else `<host>-<pid>` */
  readonly nodeName?: string;
  /** Stream replicas when the node creates DOCKET (3 on a NATS cluster). @defaultValue 1 */
  readonly replicas?: number;
  /** How long a queue leadership lease lasts without renewal (wall clock). @defaultValue 5000 */
  readonly leadershipLeaseMs?: number;
  /** When the log tail stops following the stream while this node is the only writer (LogTail). */
  readonly tail?: Pick<LogTailOptions, 'soloAfterMs' | 'checkEveryMs'>;
  /**
   * How long a finished job's body stays in memory after its last event (src/reactors/evictor.ts);
   * then only a compact entry stays and `get` reads it back from the log. `DOCKET_FINISHED_RETENTION_MS` for `docket up`.
   * @defaultValue 3600000 (one hour)
   */
  readonly finishedRetentionMs?: number;
  /**
   * What the node publishes live (core NATS, not stored) after each commit: `commit`, the commit
   * as stored on `docket.live.q.<queue>` / `docket.live.sys`; `each`, that and each event on its
   * own subject `docket.evt.<kind>.<queue>.<id>` as well, for subscribers that pick events by
   * subject (a message per event costs the leader about a sixth of its CPU; README "Live events").
   * `DOCKET_LIVE_EVENTS` for `docket up`. @defaultValue 'commit'
   */
  readonly liveEvents?: LiveEventMode;
}

export interface DocketNode {
  readonly name: string;
  readonly nc: NatsConnection;
  readonly store: JobStore;
  /** Every non-job aggregate (queues, reservations, ...). */
  readonly aggregates: AggregateStore;
  readonly tail: LogTail;
  /** The append transport of this node's partition writers (tests append through it directly). */
  readonly events: EventStore;
  readonly queueOrder: QueueOrder;
  readonly progress: Progress;
  readonly keys: KeyIndex;
  readonly queueIndex: QueueIndex;
  readonly commands: CommandService;
  readonly leadership: Leadership;
  readonly leases: LeaseKeeper;
  /** Fan-out jobs' nodes, and the worker nodes seen per queue. */
  readonly jobNodes: JobNodeIndex;
  /** Evicts finished jobs' bodies after the retention period (tests await its sweeps). */
  readonly evictor: Evictor;
  dispatcher(queue: string): QueueDispatcher | undefined;
  /** The worker protocol served in this process: what a `Worker` given `local: node` calls (README "Embedded workers"). */
  readonly work: LocalWork;
  /** The commits this node writes, as they are acknowledged: what a `Client` given `local: node` reads `live()` events from. */
  readonly live: LocalLive & { readonly nc: NatsConnection };
  readonly context: CommandContext;
  readonly log: Logger;
  /** Writes a checkpoint now (no-op without a dataDir). */
  checkpoint(): Promise<void>;
  close(): Promise<void>;
}

export async function startNode(options: DocketOptions = {}): Promise<DocketNode> {
  const name = options.nodeName === undefined ? await nodeIdentity(options.dataDir) : toNodeToken(options.nodeName);
  // Components log through children of `root`, so each line names one component.
  const root = (options.logger ?? silentLogger).child({ node: name });
  if (options.appendNc !== undefined && !(options.appendNc as { options?: { noEcho?: boolean } }).options?.noEcho) {
    // It would hear its own appends as another writer's and never stop following.
    throw new InvalidRequestError('appendNc must be a connection opened with noEcho: true');
  }
  const undo: Undo[] = [];
  try {
    return await openNode(options, name, root, undo);
  } catch (err) {
    // A start that fails half way leaves nothing open: a caller that retries would pile up
    // connections, and their timers and subscriptions, on every attempt. Each step is bounded:
    // on a dead connection a stop may wait for something that never comes, and the caller
    // must still get its error.
    for (const step of undo.reverse()) await withinMs(UNDO_STEP_MAX_MS, Promise.resolve().then(step).catch(() => undefined));
    throw err;
  }
}

/** How long one undo step of a failed start may take before the next one runs. */
const UNDO_STEP_MAX_MS = 5_000;

/** Stops what a failed start had opened (the node's `close()` does it in order once serving). */
type Undo = () => unknown;

async function openNode(options: DocketOptions, name: string, root: Logger, undo: Undo[]): Promise<DocketNode> {
  const log = root.child({ component: 'node' });
  const clock = options.clock ?? systemClock;
  const ownsConnection = options.nc === undefined;
  const servers = options.servers === undefined ? {} : { servers: options.servers };
  const nc = options.nc ?? (await connectNats({ ...servers, name: `docket-${name}` }));
  if (ownsConnection) undo.push(() => nc.close());
  watchConnection(nc, root.child({ component: 'nats' }));

  log.debug('connected');
  const jsm = await ensureStream(nc, options.replicas === undefined ? {} : { replicas: options.replicas });
  const info = await jsm.streams.info(STREAM);
  const streamCreated = info.created;
  const lastSeqAtStart = info.state.last_seq;

  const kernel = new Kernel();
  const { jobs: store, aggregates } = kernel;
  const queueOrder = new QueueOrder(() => clock.now(), (jobId) => store.get(jobId));
  const progress = new Progress();
  const keys = new KeyIndex();
  const queueIndex = new QueueIndex();
  const flowCounts = new FlowCounts((queue) => aggregates.stateOf<QueueContext>('queue', queue).context.settings);
  for (const projection of [queueOrder, progress, keys, queueIndex, flowCounts]) store.onChange(projection.apply);
  const jobNodes = new JobNodeIndex(aggregates);
  aggregates.onChange(jobNodes.apply);
  // Before the checkpoint is restored and the log folded: every finished job is noted as it is seen.
  const evictor = new Evictor(options.finishedRetentionMs ?? DEFAULT_FINISHED_RETENTION_MS, root.child({ component: 'evictor' }));
  store.onChange(evictor.apply);
  store.onReinstate(evictor.reinstated);
  store.onEvict(queueIndex.evict);

  const checkpointFile = options.dataDir === undefined ? undefined : new CheckpointFile(join(options.dataDir, 'checkpoint.json'), streamCreated);
  let fromSeq = 1;
  if (checkpointFile) {
    const restoring = Date.now();
    const checkpoint = await checkpointFile.read();
    if (checkpoint && checkpoint.seq <= lastSeqAtStart) {
      const { cold } = checkpoint;
      if (cold !== undefined) {
        // A cold job not yet due waits among the delayed: it is restored as an object.
        const now = clock.now();
        const runAt = cold.columns.runAtMs;
        for (let row = 0; row < cold.rows; row++) {
          if (!cold.isCold(row) || runAt[row]! <= now) continue;
          const record = cold.recordAt(row);
          cold.leave(row);
          store.restore(record);
        }
        store.restoreCold(cold);
        queueOrder.restoreCold(cold);
        queueIndex.restoreCold(cold);
        cold.columns.ranges.forEach(([start, end], q) => {
          let known = 0;
          for (let row = start; row < end; row++) if (cold.isKnownByRow(row)) known += 1;
          progress.countRestored(cold.columns.queues[q]!, 'queued', known);
        });
      }
      for (const record of checkpoint.records) store.restore(record);
      for (const line of checkpoint.evicted) {
        store.restoreEvicted(line);
        progress.countRestored(line.queue, line.status);
        queueIndex.know(line.queue);
      }
      for (const record of checkpoint.aggregates) aggregates.restore(record);
      fromSeq = checkpoint.seq + 1;
      log.info({ seq: checkpoint.seq, jobs: checkpoint.records.length, cold: cold?.size ?? 0, aggregates: checkpoint.aggregates.length, ms: Date.now() - restoring }, 'checkpoint restored');
    } else {
      checkpoint?.cold?.close();
    }
    // Only changes by events go into the next segment; restored records are in the file already.
    store.onChange((change) => {
      if (change.recorded) checkpointFile.changed(change.after.jobId);
    });
    store.onEvict((eviction) => checkpointFile.evicted(eviction.record.jobId, eviction.line));
  }

  // The appends go out on a connection of their own, opened with noEcho, when the node owns its
  // connections: on it the tail hears only other writers and can stop following while alone.
  const appendNc = ownsConnection
    ? await connectNats({ ...servers, name: `docket-${name}-appends`, noEcho: true })
    : (options.appendNc ?? nc);
  if (ownsConnection) undo.push(() => appendNc.close());
  const tail = new LogTail(nc, kernel, root.child({ component: 'tail' }), fromSeq, appendNc === nc ? {} : { ...options.tail, appendConnection: appendNc, ownNode: name });
  const started = Date.now();
  log.debug({ fromSeq, lastSeqAtStart }, 'folding the log');
  undo.push(() => tail.stop());
  await tail.start();
  log.debug({ position: tail.position }, 'tail started');
  await tail.waitForEnd(lastSeqAtStart);
  log.info({ events: lastSeqAtStart - fromSeq + 1, ms: Date.now() - started, jobs: store.size }, 'log folded');

  const events = new EventStore(appendNc);
  undo.push(() => events.close());
  const catchUp = async (): Promise<void> => {
    const { state } = await jsm.streams.info(STREAM);
    // Bounded all the same: a command should not wait long on a slow tail.
    await withinMs(CATCH_UP_MAX_MS, tail.waitFor(state.last_seq));
  };

  // The writers of the partitions this node leads (set when a lease is taken).
  // Replies and live events leave together at the end of a turn, workers' replies in a socket
  // write ahead of the rest (src/nats/outbox.ts).
  const outbox = new Outbox(appendNc, root.child({ component: 'outbox' }));
  const localLive = new LocalLiveCommits(appendNc, root.child({ component: 'live' }));
  const writers = new PartitionWriters({ appendNc, outbox, events, jsm, node: name, kernel, tail, onDeposed: (queue) => void leadership.relinquish(queue), liveEvents: options.liveEvents ?? 'commit', localLive, log: root.child({ component: 'writer' }) });
  const readCommit = commitReader(jsm);
  const context: CommandContext = {
    store,
    aggregates,
    tail,
    keys,
    jobNodes,
    clock,
    ids: options.ids ?? randomIds,
    node: name,
    log,
    catchUp,
    readCommit,
    writer: (queue) => writers.writer(queue),
    handOff: (queue, writer, submits) => dispatchers.get(queue)?.handOff(writer, submits) ?? [],
  };
  const flowView: FlowViewContext = { store, aggregates, counts: flowCounts, queueOrder, clock };
  const queries: QueryContext = { store, jobNodes, progress, queueIndex, queueOrder, replyBudget: () => replyBudget(nc), holdOf: (record) => holdOf(flowView, record), flowOf: (queue) => flowSummary(flowView, queue), readCommit };

  // Writes run on the leader of their queue's partition: here, or forwarded to it.
  // A queue with no live job, no parked claim and nothing in its writer needs no leader.
  /** The sys partition leader's reactors (schedule ticks, ...). */
  const sysReactors: SysReactor[] = [];
  // An active reservation needs its leader too: someone must expire it.
  const isIdle = (queue: string): boolean => {
    if (queue === SYS_LEASE) return writers.idle(queue) && !sysReactors.some((reactor) => reactor.needsLeader());
    const { pending, reserved } = progress.of(queue);
    return pending + reserved === 0 && (dispatchers.get(queue)?.parked ?? 0) === 0 && writers.idle(queue) && aggregates.stateOf('reservation', queue).value !== 'active';
  };
  const leadership = new Leadership(nc, name, root.child({ component: 'leadership' }), options.leadershipLeaseMs ?? DEFAULT_LEADERSHIP_LEASE_MS, options.replicas ?? 1, isIdle);
  const router = new PartitionRouter(nc, leadership, tail, root.child({ component: 'router' }));
  router.register('submit', async (_queue, body) => ({ jobs: await submitPart(context, body as SubmitPart) }));
  router.register('cancel', (_queue, body) => cancelJob(context, body as CancelCommand));
  router.register('retry', (_queue, body) => retryJob(context, body as RetryCommand));
  router.register('move', (_queue, body) => moveJob(context, body as MoveCommand));
  router.register('promote', (_queue, body) => promoteJob(context, body as PromoteCommand));
  // An evicted job's queue is in its compact entry: only the leader reads its body back.
  const onItsLeader = async (op: string, command: { job_id: string }): Promise<Record<string, unknown>> => router.run(store.queueOf(command.job_id) ?? (await findJob(context, command.job_id)).queue, op, command);
  router.register('group.create', (_lease, body) => createGroup(context, body as GroupCreateCommand, (queue, member) => router.run(queue, 'group.submit', member)));
  router.register('group.submit', (_queue, body) => submitGroupMember(context, body as GroupMemberSubmit));
  router.register('group.decide', (_queue, body) => decideGroupMember(context, body as Parameters<typeof decideGroupMember>[1]));
  router.register('pause', (_queue, body) => pauseQueue(context, body as PauseCommand));
  router.register('resume', (_queue, body) => resumeQueue(context, body as ResumeCommand));
  router.register('queue.set', (_queue, body) => setQueue(context, body as QueueSetCommand));
  router.register('reserve', (_queue, body) => reserve(context, body as ReserveCommand));
  router.register('release', (_queue, body) => release(context, body as ReleaseCommand));
  router.register('renew', (_queue, body) => renew(context, body as RenewCommand));
  // A queue is known by a job or state of its own; checked before any leader is asked (or made).
  const isKnown = (queue: string) => queueIndex.has(queue) || aggregates.get('queue', queue) !== undefined || aggregates.get('reservation', queue) !== undefined;
  const onKnownQueue = async (op: string, command: { queue: string; create?: boolean | undefined }): Promise<Record<string, unknown>> => {
    if (!isKnown(command.queue)) await catchUp();
    assertKnownQueue(isKnown(command.queue), command.queue, command.create);
    return router.run(command.queue, op, command);
  };

  const commands = new CommandService(nc, root.child({ component: 'commands' }), outbox);
  commands.register('submit', (body) => submitCommand(validateSubmit(fillTemplateQueues(body, aggregates)), async (queue, part) => (await router.run(queue, 'submit', part))['jobs'] as SubmitItemReply[]));
  commands.register('cancel', (body) => onItsLeader('cancel', validate(cancelSchema, body)));
  commands.register('retry', (body) => onItsLeader('retry', validate(retrySchema, body)));
  commands.register('move', (body) => onItsLeader('move', validate(moveSchema, body)));
  commands.register('promote', (body) => onItsLeader('promote', validate(promoteSchema, body)));
  commands.register('get', (body) => getJobOrEvicted(queries, validate(getSchema, body)));
  commands.register('list', (body) => listJobs(queries, validate(listSchema, body)));
  commands.register('progress', (body) => progressOf(queries, validate(progressSchema, body)));
  commands.register('pause', (body) => onKnownQueue('pause', validate(pauseSchema, body)));
  commands.register('resume', (body) => onKnownQueue('resume', validate(resumeSchema, body)));
  commands.register('queue.set', (body) => onKnownQueue('queue.set', validate(queueSetSchema, body)));
  commands.register('queue.show', (body) => showQueue(flowView, validate(queueShowSchema, body)));
  commands.register('reserve', (body) => onKnownQueue('reserve', validate(reserveSchema, body)));
  commands.register('release', (body) => {
    const command = validate(releaseSchema, body);
    return router.run(queueOfReservation(command.reservation_id), 'release', command);
  });
  commands.register('renew', (body) => {
    const command = validate(renewSchema, body);
    return router.run(queueOfReservation(command.reservation_id), 'renew', command);
  });
  commands.register('reservations', (body) => listReservations(flowView, validate(reservationsSchema, body)));
  commands.register('group.create', (body) => router.run(SYS_LEASE, 'group.create', validate(groupCreateSchema, body)));
  commands.register('group.get', (body) => getGroup(store, aggregates, validate(groupGetSchema, body)));
  commands.register('group.list', (body) => {
    validate(groupListSchema, body);
    return listGroups(store, aggregates);
  });
  commands.register('group.cancel', (body) => cancelGroup(context, validate(groupCancelSchema, body), (queue, decision) => router.run(queue, 'group.decide', decision)));
  registerBulkCommands({
    deps: { context, queueIndex, queueOrder, replyBudget: () => replyBudget(nc) },
    registerOnLeader: (op, operation) => router.register(op, operation),
    runOnLeader: (queue, op, body) => router.run(queue, op, body),
    registerCommand: (verb, handler) => commands.register(verb, handler),
    knowsQueue: (queue) => queueOrder.queues().includes(queue),
  });
  registerJobSetCommands({
    deps: { context, queueIndex, progress, env: process.env },
    registerOnLeader: (op, operation) => router.register(op, operation),
    runOnLeader: (queue, op, body) => router.run(queue, op, body),
    registerCommand: (verb, handler) => commands.register(verb, handler),
  });
  commands.register('schedule.preview', (body) => ({ ...previewSchedule(clock, body) }));
  // Templates and schedules (partition sys); the ticker fires on the sys leader.
  const scheduleTicker = registerScheduleCommands({
    context,
    clock,
    log: root.child({ component: 'schedules' }),
    isSysLeader: () => leadership.isLeader(SYS_LEASE),
    registerOnLeader: (op, operation) => router.register(op, operation),
    runOnLeader: (queue, op, body) => router.run(queue, op, body),
    registerCommand: (verb, handler) => commands.register(verb, handler),
  });
  sysReactors.push(scheduleTicker);
  undo.push(() => scheduleTicker.stop());

  // Counted in events, not commits: a restart after a crash folds what came after the last
  // checkpoint, and its cost is per event (a commit holds 1 to thousands of them).
  let foldedAtCheckpoint = 0;
  let writing: Promise<void> | undefined;
  const checkpoint = async (): Promise<void> => {
    if (!checkpointFile) return;
    await writing;
    const seq = tail.position;
    const folded = kernel.folded;
    const started = Date.now();
    writing = checkpointFile
      .write(seq, store, [...aggregates.values()])
      .then(({ records, full }) => {
        foldedAtCheckpoint = folded;
        log.info({ seq, records, full, jobs: store.size, ms: Date.now() - started }, 'checkpoint written');
      })
      .finally(() => {
        writing = undefined;
      });
    await writing;
  };
  const everyEvents = options.checkpointEveryEvents ?? 1_000_000;
  const checkpointTimer = setInterval(() => {
    if (kernel.folded - foldedAtCheckpoint >= everyEvents && !writing) {
      checkpoint().catch((err: unknown) => log.warn({ err }, 'checkpoint failed'));
    }
  }, 1000);
  checkpointTimer.unref();
  undo.push(() => clearInterval(checkpointTimer));
  if (checkpointFile && kernel.folded - foldedAtCheckpoint >= everyEvents) await checkpoint();

  // Leader-only reactors: the queue's writer, dispatcher, leases and retries.
  undo.push(() => leadership.stop());
  await leadership.start();
  const isLeader = (queue: string) => leadership.isLeader(queue);
  const leases = new LeaseKeeper(context, isLeader, clock, root.child({ component: 'leases' }));
  const retrier = new Retrier(context, isLeader, root.child({ component: 'retrier' }));
  const dependencies = new DependencyReleaser(context, isLeader, root.child({ component: 'dependencies' }));
  const groups = new GroupCoordinator({ ctx: context, isSysLeader: () => leadership.isLeader(SYS_LEASE), decide: (queue, body) => router.run(queue, 'group.decide', body), log: root.child({ component: 'groups' }) });
  aggregates.onChange(groups.applyAggregate);
  store.onChange(groups.applyJob);
  sysReactors.push(groups);
  store.onChange(leases.apply);
  const fanOut = new FanOutCoordinator({ ...context, jobNodes }, isLeader, clock, root.child({ component: 'fan-out' }));
  aggregates.onChange(fanOut.applyAggregate);
  store.onChange(fanOut.applyJob);
  fanOut.start();
  undo.push(() => fanOut.stop());
  store.onChange(retrier.apply);
  store.onChange(dependencies.apply);
  const reservationExpirer = new ReservationExpirer(context, isLeader, clock, root.child({ component: 'reservations' }));
  aggregates.onChange(reservationExpirer.apply);
  reservationExpirer.start();
  undo.push(() => reservationExpirer.stop());
  const dispatchers = new Map<string, QueueDispatcher>();
  queueOrder.onReady((queue) => dispatchers.get(queue)?.pump());
  // A slot or a hold freed: a running job ended, a queue resumed, a reservation ended, a limit changed.
  flowCounts.onFreed((queue, key) => {
    const dispatcher = dispatchers.get(queue);
    dispatcher?.freeKey(key);
    dispatcher?.pump();
  });
  aggregates.onChange(({ after }) => {
    if (after.queue === null) return;
    const dispatcher = dispatchers.get(after.queue);
    // New settings may hold other keys or none: parked jobs are looked at again.
    if (after.kind === 'queue') dispatcher?.freeAllKeys();
    dispatcher?.pump();
  });
  const unsubscribeClock = clock.onChange?.(() => {
    for (const dispatcher of dispatchers.values()) dispatcher.pump();
  });
  undo.push(() => unsubscribeClock?.());
  undo.push(() => {
    for (const dispatcher of dispatchers.values()) dispatcher.stop();
  });
  undo.push(() => writers.stopAll('this node is stopping'));
  leadership.onChange((queue, leading) => {
    if (queue === SYS_LEASE) {
      // The sys partition: templates, schedules, groups. Its reactors run once it is folded to its tip.
      if (leading) writers.start(queue, leadership.epochOf(queue), () => sysReactors.forEach((reactor) => reactor.adopt()));
      else {
        writers.stop(queue, 'this node no longer leads the sys partition');
        sysReactors.forEach((reactor) => reactor.drop());
      }
      return;
    }
    if (leading) {
      // Claims are taken at once; they are decided once the writer serves.
      if (!dispatchers.has(queue)) dispatchers.set(queue, new QueueDispatcher(queue, context, queueOrder, clock, root.child({ component: 'dispatcher', queue }), () => replyBudget(nc), new FlowGate(queue, aggregates, flowCounts)));
      // Recovery on start or takeover (DESIGN's matrix), once the partition is folded to its tip:
      // fresh leases for running jobs, missing retries, then dispatch.
      writers.start(queue, leadership.epochOf(queue), () => {
        // Cold jobs are queued: nothing these look for (running, failed, waiting on dependencies).
        leases.adopt(queue, store.warmValues());
        retrier.adopt(queue, store.warmValues());
        dependencies.adopt(queue, store.warmValues());
        reservationExpirer.adopt(queue);
        fanOut.adopt(queue);
        dispatchers.get(queue)?.pump();
      });
    } else {
      writers.stop(queue, `this node no longer leads ${queue}`);
      dispatchers.get(queue)?.stop();
      dispatchers.delete(queue);
      leases.drop(queue);
      retrier.drop(queue);
      reservationExpirer.drop(queue);
      fanOut.drop(queue);
    }
  });
  for (const queue of queueIndex.queues()) leadership.watch(queue);
  // A reserved queue without jobs still needs a leader to expire its reservation.
  for (const record of aggregates.values()) leadership.watch(record.queue ?? SYS_LEASE);
  aggregates.onChange(({ before, after }) => {
    if (before === undefined) leadership.watch(after.queue ?? SYS_LEASE);
  });
  store.onChange((change) => {
    if (change.before === undefined) leadership.watch(change.after.queue);
  });
  leases.start();
  undo.push(() => leases.stop());
  evictor.start(context);
  undo.push(() => evictor.stop());
  const work = new WorkService(nc, context, leadership, router, (queue) => dispatchers.get(queue), leases, root.child({ component: 'work' }), outbox, fanOut);

  undo.push(() => router.stop());
  await router.start();
  undo.push(() => commands.stop());
  await commands.start();
  undo.push(() => work.stop());
  await work.start();
  log.info({ stream: STREAM, seq: tail.position }, 'serving');

  let closed = false;
  return {
    name,
    nc,
    store,
    aggregates,
    tail,
    events,
    queueOrder,
    progress,
    keys,
    queueIndex,
    commands,
    work,
    live: localLive,
    leadership,
    leases,
    jobNodes,
    evictor,
    dispatcher: (queue) => dispatchers.get(queue),
    context,
    log,
    checkpoint,
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(checkpointTimer);
      unsubscribeClock?.();
      for (const dispatcher of dispatchers.values()) dispatcher.stop();
      await work.stop();
      await commands.stop();
      await router.stop();
      leases.stop();
      evictor.stop();
      reservationExpirer.stop();
      // Its lease check is an interval: left running, it kept the whole closed node in memory.
      fanOut.stop();
      scheduleTicker.stop();
      await leadership.stop();
      writers.stopAll('this node is stopping');
      await checkpoint();
      // After the last checkpoint: a whole rewrite reads the cold rows' lines from the old file.
      store.cold?.close();
      await tail.stop();
      await events.close();
      if (ownsConnection) await Promise.all([nc.drain(), appendNc.drain()]);
      log.info('closed');
    },
  };
}
