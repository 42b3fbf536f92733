/**
 * The worker protocol, `docket.work.<queue>.{claim,heartbeat,complete,fail}`, served by the
 * queue's leader. Every node listens in the `docket` queue group; the node a request lands on
 * serves it when it leads the queue (taking the lease when nobody holds it), and otherwise
 * forwards it to the leader's private subject `docket.leader.<node>.<queue>.<verb>`.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import type { Leadership } from '../cluster/leadership.js';
import type { PartitionRouter } from '../cluster/partition-router.js';
import { errorReply, replyBytes } from '../commands/command-service.js';
import { envelope, transitionJob, type CommandContext } from '../commands/handle-command.js';
import { claimSchema, completeSchema, failSchema, heartbeatSchema, type ClaimedJob, type NextClaimCommand } from '../commands/schemas.js';
import { parseJson, validate } from '../commands/validate.js';
import { coerceError, DocketError, InvalidRequestError, UnavailableError } from '../errors.js';
import type { JobError } from '../../machines/index.js';
import type { Logger } from '../logger.js';
import { COMMAND_QUEUE_GROUP, parseWorkSubject, subjects, WORK_VERBS, type WorkVerb } from '../nats/subjects.js';
import type { LeaseKeeper } from '../reactors/leases.js';
import type { QueueDispatcher } from './dispatcher.js';

/** Extra time a forwarded long-poll claim gets beyond its own wait. */
const FORWARD_SLACK_MS = 5_000;

export class WorkService {
  private readonly subs: Subscription[] = [];
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly ctx: CommandContext,
    private readonly leadership: Leadership,
    private readonly router: PartitionRouter,
    private readonly dispatcherFor: (queue: string) => QueueDispatcher | undefined,
    private readonly leases: LeaseKeeper,
    private readonly log: Logger,
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
    // Not a verb of the protocol: retrying cannot help, so not `unavailable`.
    if (!parsed) return this.respond(msg, errorReply(new InvalidRequestError(`unknown work request ${msg.subject}; verbs: ${WORK_VERBS.join(', ')}`), this.log));
    try {
      // Twice at most: a leader that just stopped has no responders; look the lease up again.
      for (let attempt = 0; ; attempt++) {
        const leader = await this.router.leaderOf(parsed.queue);
        if (!leader) throw new UnavailableError(`queue ${parsed.queue} has no leader yet; retry`);
        if (leader.node === this.leadership.node) return await this.serve(msg);
        const body = parseJson(msg.data) as { wait_ms?: number };
        const timeout = (typeof body.wait_ms === 'number' ? body.wait_ms : 0) + FORWARD_SLACK_MS;
        try {
          const reply = await this.nc.request(subjects.leaderWork(leader.node, parsed.queue, parsed.verb), msg.data, { timeout });
          if (msg.reply) msg.respond(reply.data);
          return;
        } catch (err) {
          this.router.forget(parsed.queue);
          if (attempt >= 1 || !/no responders/i.test(coerceError(err).message)) throw err;
        }
      }
    } catch (err) {
      this.router.forget(parsed.queue);
      const reason = err instanceof DocketError ? err : new UnavailableError(`leader did not answer: ${coerceError(err).message}`, { cause: err });
      this.respond(msg, errorReply(reason, this.log));
    }
  }

  private async serve(msg: Msg): Promise<void> {
    const parsed = parseWorkSubject(msg.subject);
    try {
      if (!parsed) throw new UnavailableError(`unknown work subject ${msg.subject}`);
      if (!this.leadership.isLeader(parsed.queue)) throw new UnavailableError(`this node no longer leads ${parsed.queue}; retry`);
      const result = await this.handle(parsed.queue, parsed.verb, parseJson(msg.data));
      this.respond(msg, { ok: true, ...result });
    } catch (err) {
      this.respond(msg, errorReply(err, this.log));
    }
  }

  private async handle(queue: string, verb: WorkVerb, body: unknown): Promise<Record<string, unknown>> {
    // Served once the queue's writer serves: folded to the partition's tip, leases adopted.
    await this.ctx.writer(queue);
    switch (verb) {
      case 'claim': {
        const request = validate(claimSchema, body);
        const dispatcher = this.dispatcherFor(queue);
        if (!dispatcher) throw new UnavailableError(`no dispatcher for ${queue}; retry`);
        return { jobs: await dispatcher.claim(request) };
      }
      case 'heartbeat': {
        const request = validate(heartbeatSchema, body);
        for (const [runId, progress] of Object.entries(request.progress ?? {})) this.log.info({ queue, runId, progress }, 'progress');
        return { lost: this.leases.heartbeat(queue, request.run_ids) };
      }
      case 'complete': {
        const request = validate(completeSchema, body);
        this.assertQueue(queue, request.job_id);
        const { record } = await transitionJob(this.ctx, request.job_id, `complete:${request.run_id}`, (current, eventId) =>
          envelope(this.ctx, 'job.succeeded', current, eventId, {
            run_id: request.run_id,
            result: (request.result ?? null) as never,
            ...(request.exit_code === undefined ? {} : { exit_code: request.exit_code }),
          }),
        );
        return { job_id: record.jobId, status: record.state.job.value, ...(await this.claimNext(queue, request.next)) };
      }
      case 'fail': {
        const request = validate(failSchema, body);
        this.assertQueue(queue, request.job_id);
        const { record } = await transitionJob(this.ctx, request.job_id, `fail:${request.run_id}`, (current, eventId) =>
          envelope(this.ctx, 'job.failed', current, eventId, {
            run_id: request.run_id,
            reason: 'error',
            error: request.error as JobError,
            ...(request.exit_code === undefined ? {} : { exit_code: request.exit_code }),
          }),
        );
        return { job_id: record.jobId, status: record.state.job.value, ...(await this.claimNext(queue, request.next)) };
      }
      default: {
        const unhandled: never = verb;
        throw new UnavailableError(`unknown verb ${String(unhandled)}`);
      }
    }
  }

  /**
   * The claim a completion carries, answered from what is ready now. The completion is already
   * appended, so nothing here may turn its reply into an error: no dispatcher means no jobs.
   */
  private async claimNext(queue: string, next: NextClaimCommand | undefined): Promise<{ jobs?: ClaimedJob[] }> {
    if (next === undefined) return {};
    const dispatcher = this.dispatcherFor(queue);
    return { jobs: dispatcher ? await dispatcher.claim({ ...next, wait_ms: 0 }) : [] };
  }

  /** A completion must come on its job's queue: the subject names which leader decides it. */
  private assertQueue(queue: string, jobId: string): void {
    const record = this.ctx.store.get(jobId);
    if (record && record.queue !== queue) throw new InvalidRequestError(`job ${jobId} is in queue ${record.queue}, not ${queue}`, { details: { job_id: jobId } });
  }

  private respond(msg: Msg, reply: Record<string, unknown>): void {
    if (msg.reply) msg.respond(replyBytes(reply));
  }

  async stop(): Promise<void> {
    for (const sub of this.subs.splice(0)) sub.unsubscribe();
    await Promise.allSettled([...this.inFlight]);
  }
}
