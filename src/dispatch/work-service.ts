/**
 * The worker protocol, `docket.work.<queue>.{claim,heartbeat,complete,fail}`, served by the
 * queue's leader. Every node listens in the `docket` queue group; the node a request lands on
 * serves it when it leads the queue (taking the lease when nobody holds it), and otherwise
 * forwards it to the leader's private subject `docket.leader.<node>.<queue>.<verb>`.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import type { Leadership } from '../cluster/leadership.js';
import { refuseAsNotLeader, type PartitionRouter } from '../cluster/partition-router.js';
import { answeredInProcess, errorReply, maxPayload, respondSafely } from '../commands/reply.js';
import type { CommandContext } from '../commands/handle-command.js';
import { endRun } from '../commands/job-commands.js';
import {
  claimSchema,
  completeBatchSchema,
  completeSchema,
  failBatchSchema,
  failSchema,
  heartbeatSchema,
  type ClaimCommand,
  type ClaimedJob,
  type NextClaimCommand,
} from '../commands/schemas.js';
import { Limits } from '../commands/limits.js';
import { parseJson, validate } from '../commands/validate.js';
import { coerceError, DocketError, excerpt, InvalidRequestError, UnavailableError } from '../errors.js';
import type { Logger } from '../logger.js';
import { COMMAND_QUEUE_GROUP, isQueueName, parseWorkSubject, subjects, WORK_VERBS, type WorkVerb } from '../nats/subjects.js';
import type { LeaseKeeper } from '../reactors/leases.js';
import { ClaimReplies } from './claim-replies.js';
import type { QueueDispatcher } from './dispatcher.js';
import type { Outbox } from '../nats/outbox.js';

/** Extra time a forwarded long-poll claim gets beyond its own wait. */
const FORWARD_SLACK_MS = 5_000;

/**
 * Why a subject is not a work request, naming the part that is wrong (quoted short: a subject
 * can be as long as the server's control line).
 */
function badWorkSubject(subject: string): InvalidRequestError {
  const parts = subject.split('.');
  const leader = parts[1] === 'leader';
  const [queue, verb] = leader ? [parts[3], parts[4]] : [parts[2], parts[3]];
  if (parts.length !== (leader ? 5 : 4) || queue === undefined || verb === undefined) {
    return new InvalidRequestError(`work requests go to docket.work.<queue>.<verb>, not ${excerpt(subject)}`);
  }
  if (!isQueueName(queue)) return new InvalidRequestError(`invalid queue name ${excerpt(queue)}: must match [A-Za-z0-9_-]{1,64}`);
  return new InvalidRequestError(`unknown work verb ${excerpt(verb)}; verbs: ${WORK_VERBS.join(', ')}`);
}

/** A request's `wait_ms` as the leader will bound it; 0 when it has none. */
function boundedWaitMs(body: unknown): number {
  const waitMs = body !== null && typeof body === 'object' ? (body as { wait_ms?: unknown }).wait_ms : undefined;
  return typeof waitMs === 'number' && Number.isFinite(waitMs) ? Math.min(Math.max(0, waitMs), Limits.MaxClaimWaitMs) : 0;
}

/** How long a forwarded request may take at the leader: a claim's own wait, or a completion's next claim's. */
function forwardWaitMs(body: unknown): number {
  const next = body !== null && typeof body === 'object' ? (body as { next?: unknown }).next : undefined;
  return Math.max(boundedWaitMs(body), boundedWaitMs(next));
}

/** Validates a work request's body for its verb (the leader validates again as it decides). */
function validateWork(verb: WorkVerb, body: unknown): void {
  switch (verb) {
    case 'claim':
      validate(claimSchema, body);
      return;
    case 'heartbeat':
      validate(heartbeatSchema, body);
      return;
    case 'complete':
      validate(isBatch(body) ? completeBatchSchema : completeSchema, body);
      return;
    case 'fail':
      validate(isBatch(body) ? failBatchSchema : failSchema, body);
      return;
  }
}

/** A batch completion: `{runs: [...]}` instead of one run's fields. */
function isBatch(body: unknown): boolean {
  return body !== null && typeof body === 'object' && Object.hasOwn(body, 'runs');
}

/** The worker protocol without NATS, for a worker in the leader's own process. */
export interface LocalWork {
  /** One request's body (JSON bytes) in, its reply (JSON bytes) out: as `docket.work.<queue>.<verb>` would answer it. */
  local(queue: string, verb: WorkVerb, data: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
}

export class WorkService implements LocalWork {
  private readonly subs: Subscription[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  /** Stopped: a local request goes over NATS, to whichever node leads its queue now. */
  private stopped = false;
  /** Answers of claims with a request id, for their resends (src/dispatch/claim-replies.ts). */
  private readonly claimReplies = new ClaimReplies((queue, runId) => this.leases.holds(queue, runId) || this.nodeLeases?.holds(queue, runId) === true);

  constructor(
    private readonly nc: NatsConnection,
    private readonly ctx: CommandContext,
    private readonly leadership: Leadership,
    private readonly router: PartitionRouter,
    private readonly dispatcherFor: (queue: string) => QueueDispatcher | undefined,
    private readonly leases: LeaseKeeper,
    private readonly log: Logger,
    /** Where replies go out, with the node's live events (one write per turn); without it, on `nc`. */
    private readonly outbox?: Outbox,
    /** Fan-out jobs' node runs: their leases are kept apart from jobs' (src/reactors/fan-out.ts). */
    private readonly nodeLeases?: { heartbeat(queue: string, runIds: readonly string[]): string[]; holds(queue: string, runId: string): boolean },
  ) {}

  /** Subscribes and waits until the server has the subscriptions. */
  async start(): Promise<void> {
    const track = (work: Promise<void>) => {
      const done = work.finally(() => this.inFlight.delete(done));
      this.inFlight.add(done);
    };
    const route = (err: Error | null, msg: Msg) => {
      if (!err) track(this.route(msg));
    };
    const serve = (err: Error | null, msg: Msg) => {
      if (!err) track(this.serve(msg));
    };
    this.subs.push(
      this.nc.subscribe(subjects.allWork, { queue: COMMAND_QUEUE_GROUP, callback: route }),
      this.nc.subscribe(subjects.leaderInbox(this.leadership.node), { callback: serve }),
    );
    await this.nc.flush();
  }

  private async route(msg: Msg): Promise<void> {
    const parsed = parseWorkSubject(msg.subject);
    // Not a request of the protocol: retrying cannot help, so not `unavailable`.
    if (!parsed) return this.respond(msg, errorReply(badWorkSubject(msg.subject), this.log));
    try {
      // Its body is passed on to the leader, so it must fit this connection too (a cluster's
      // servers may differ): too big is the request's fault, not an outage of the leader.
      const limit = maxPayload(this.nc);
      if (msg.data.length > limit) throw new InvalidRequestError(`the request (${msg.data.length} bytes) exceeds the max payload of ${limit} bytes`, { details: { max_payload: limit } });
      if (this.leadership.isLeader(parsed.queue)) return await this.serve(msg);
      // Checked before a leader is looked up (which takes a free lease): a bad request must not
      // make any node lead a queue named only by it.
      validateWork(parsed.verb, parseJson(msg.data));
      const timeout = forwardWaitMs(parseJson(msg.data)) + FORWARD_SLACK_MS;
      await this.router.toLeader(
        parsed.queue,
        () => this.serve(msg),
        async (leader) => this.respond(msg, (await this.router.forward(leader, parsed.queue, subjects.leaderWork(leader, parsed.queue, parsed.verb), msg.data, timeout)).data),
      );
    } catch (err) {
      this.router.forget(parsed.queue);
      const reason = err instanceof DocketError ? err : new UnavailableError(`leader did not answer: ${coerceError(err).message}`, { cause: err });
      this.respond(msg, errorReply(reason, this.log));
    }
  }

  private async serve(msg: Msg): Promise<void> {
    const parsed = parseWorkSubject(msg.subject);
    try {
      if (!parsed) throw badWorkSubject(msg.subject);
      // Said the same whether it led the queue once or never did: a stale forward or a request
      // sent to this node's inbox directly; either way the sender looks the leader up again.
      const body = parseJson(msg.data);
      if (!this.leadership.isLeader(parsed.queue)) {
        // Bad input is refused as such wherever it lands; only a good request is worth a retry.
        validateWork(parsed.verb, body);
        return refuseAsNotLeader(msg, `this node does not lead queue ${parsed.queue}; retry`);
      }
      const result = await this.handle(parsed.queue, parsed.verb, body);
      this.respond(msg, { ok: true, ...result });
    } catch (err) {
      this.respond(msg, errorReply(err, this.log));
    }
  }

  private async handle(queue: string, verb: WorkVerb, body: unknown): Promise<Record<string, unknown>> {
    // Each is served once the queue's writer serves (folded to the partition's tip, leases
    // adopted), and validated before that: bad input is refused as such wherever it lands.
    switch (verb) {
      case 'claim': {
        const request = validate(claimSchema, body);
        // Awaited only while the writer is not ready: an await of a plain value still takes a turn
        // of the microtask queue, on every request.
        const serving = this.ctx.writer(queue);
        if (serving instanceof Promise) await serving;
        if (request.node !== undefined) this.ctx.jobNodes?.sawNode(queue, request.node, this.ctx.clock.now());
        const dispatcher = this.dispatcherFor(queue);
        if (!dispatcher) throw new UnavailableError(`no dispatcher for ${queue}; retry`);
        return { jobs: await this.claim(queue, dispatcher, request) };
      }
      case 'heartbeat': {
        const request = validate(heartbeatSchema, body);
        const serving = this.ctx.writer(queue);
        if (serving instanceof Promise) await serving;
        if (request.node !== undefined) this.ctx.jobNodes?.sawNode(queue, request.node, this.ctx.clock.now());
        let lost = this.leases.heartbeat(queue, request.run_ids);
        // Runs no job holds may be fan-out nodes' runs (none without fan-out jobs: nothing to look at).
        if (lost.length > 0 && this.nodeLeases !== undefined) lost = this.nodeLeases.heartbeat(queue, lost);
        if (request.progress !== undefined && this.log.isLevelEnabled('debug')) {
          // Only runs this worker holds: a progress for any other run id is nobody's to report.
          const gone = new Set(lost);
          for (const runId of request.run_ids) {
            if (!gone.has(runId) && Object.hasOwn(request.progress, runId)) this.log.debug({ queue, runId, progress: request.progress[runId] }, 'progress');
          }
        }
        return { lost };
      }
      case 'complete':
      case 'fail': {
        if (isBatch(body)) {
          const request = validate(verb === 'complete' ? completeBatchSchema : failBatchSchema, body);
          const serving = this.ctx.writer(queue);
          if (serving instanceof Promise) await serving;
          // Decided together, the runs' ends and the claim for the slots they free join one
          // commit (a refused end frees its worker's slot all the same); each run is answered
          // on its own.
          const [runs, claimed] = await Promise.all([
            Promise.all(
              request.runs.map((item) =>
                endRun(this.ctx, queue, item).then(
                  (done) => ({ ok: true as const, ...done }),
                  (err: unknown) => ({ ok: false as const, job_id: item.job_id, error: (err instanceof DocketError ? err : new UnavailableError(coerceError(err).message)).toBody() }),
                ),
              ),
            ),
            this.claimNext(queue, request.next),
          ]);
          // A waiting next claim parks only when every run was taken: a run answered with an
          // error is sent again, and its resend carries the claim.
          const next = runs.every((run) => run.ok) ? await this.waitForNext(queue, request.next, claimed) : claimed;
          return { runs, ...next };
        }
        const request = validate(verb === 'complete' ? completeSchema : failSchema, body);
        const serving = this.ctx.writer(queue);
        if (serving instanceof Promise) await serving;
        // The claim for the freed slot is decided as soon as the run's end is accepted, so both
        // join one commit; a refused end claims nothing.
        let accepted!: () => void;
        const decided = new Promise<boolean>((resolve) => (accepted = () => resolve(true)));
        const finishing = endRun(this.ctx, queue, request, accepted);
        const next = Promise.race([decided, finishing.then(() => true, () => false)]).then((ok) => (ok ? this.claimNext(queue, request.next) : {}));
        const done = await finishing;
        return { ...done, ...(await this.waitForNext(queue, request.next, await next)) };
      }
      default: {
        const unhandled: never = verb;
        throw new UnavailableError(`unknown verb ${String(unhandled)}`);
      }
    }
  }

  /**
   * A claim through the queue's dispatcher; one sent again (its `request_id` seen before) gets the
   * runs its first answer handed out that still hold their jobs, and claims nothing new.
   */
  private claim(queue: string, dispatcher: QueueDispatcher, request: ClaimCommand): Promise<ClaimedJob[]> {
    const resent = this.claimReplies.resent(queue, request);
    if (resent !== undefined) return resent;
    const answer = dispatcher.claim(request);
    this.claimReplies.remember(queue, request, answer);
    return answer;
  }

  /**
   * The claim a completion carries, answered from what is ready now. The completion is already
   * appended, so nothing here may turn its reply into an error: no dispatcher means no jobs.
   */
  private async claimNext(queue: string, next: NextClaimCommand | undefined): Promise<{ jobs?: ClaimedJob[] }> {
    if (next === undefined) return {};
    const dispatcher = this.dispatcherFor(queue);
    return { jobs: dispatcher ? await this.claim(queue, dispatcher, { ...next, wait_ms: 0 }) : [] };
  }

  /**
   * A next claim with `wait_ms` that found nothing: parked as a long poll now that its completion
   * is committed (never before: a completion whose commit fails is answered with its error at
   * once, and must leave no claim behind to take a job nobody is told of). It is parked in the
   * same turn as the commit's acknowledgement, before the commit's live events go out, so a
   * submit sent by someone who saw the completion finds it waiting and hands it the job in the
   * submit's own commit.
   */
  private async waitForNext(queue: string, next: NextClaimCommand | undefined, claimed: { jobs?: ClaimedJob[] }): Promise<{ jobs?: ClaimedJob[] }> {
    if (next === undefined || (next.wait_ms ?? 0) === 0 || claimed.jobs === undefined || claimed.jobs.length > 0) return claimed;
    const dispatcher = this.dispatcherFor(queue);
    return dispatcher ? { jobs: await this.claim(queue, dispatcher, next) } : claimed;
  }

  /**
   * A request of a worker in this node's process (README "Embedded workers"): served here
   * without a NATS round trip when this node leads the queue, sent as any worker's request
   * otherwise. Bytes in and out, as on the wire: the worker and the store never share an object.
   */
  async local(queue: string, verb: WorkVerb, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    if (this.stopped || !this.leadership.isLeader(queue)) return (await this.nc.request(subjects.work(queue, verb), data, { timeout: timeoutMs })).data;
    const answered = (async (): Promise<Record<string, unknown>> => {
      try {
        return { ok: true, ...(await this.handle(queue, verb, parseJson(data))) };
      } catch (err) {
        return errorReply(err, this.log);
      }
    })();
    // The worker retries an `unavailable`, and a claim sent again with its request id gets what
    // this one claims meanwhile.
    return answeredInProcess(this.nc, this.inFlight, answered, timeoutMs, this.log);
  }

  private respond(msg: Msg, reply: Record<string, unknown> | Uint8Array): void {
    // A worker's reply leaves ahead of the turn's live events and client replies (Outbox.publishFirst).
    respondSafely(this.nc, msg, reply, this.log, this.outbox, true);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const sub of this.subs.splice(0)) sub.unsubscribe();
    await Promise.allSettled([...this.inFlight]);
  }
}
