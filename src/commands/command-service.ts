/**
 * Serves `docket.cmd.<verb>` (request/reply JSON) in the `docket` queue group, so any node
 * answers and each request is answered once. Replies are `{ ok: true, ... }` or
 * `{ ok: false, error: { code, message, details? } }`.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { excerpt, InvalidRequestError } from '../errors.js';
import type { Logger } from '../logger.js';
import { COMMAND_PREFIX, COMMAND_QUEUE_GROUP } from '../nats/subjects.js';
import { errorReply, respondSafely } from './reply.js';
import type { Outbox } from '../nats/outbox.js';
import { parseJson } from './validate.js';

/** A handler gets the parsed JSON body and returns the reply's fields (without `ok`). */
export type CommandHandler = (body: unknown, msg: Msg) => Promise<Record<string, unknown>> | Record<string, unknown>;

export class CommandService {
  private readonly handlers = new Map<string, CommandHandler>();
  private sub: Subscription | undefined;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
    /** Where replies go out, with the node's live events (one write per turn); without it, on `nc`. */
    private readonly outbox?: Outbox,
  ) {}

  register(verb: string, handler: CommandHandler): void {
    this.handlers.set(verb, handler);
  }

  /** Subscribes and waits until the server has the subscription, so a request right after is served. */
  async start(): Promise<void> {
    this.sub = this.nc.subscribe(`${COMMAND_PREFIX}.>`, {
      queue: COMMAND_QUEUE_GROUP,
      callback: (err, msg) => {
        if (err) return;
        const done = this.handle(msg).finally(() => this.inFlight.delete(done));
        this.inFlight.add(done);
      },
    });
    await this.nc.flush();
  }

  private async handle(msg: Msg): Promise<void> {
    const verb = msg.subject.slice(COMMAND_PREFIX.length + 1);
    const handler = this.handlers.get(verb);
    // The verb comes from the subject: logged and quoted only when it is one of ours.
    const log = handler ? this.log.child({ command: verb }) : this.log;
    let reply: Record<string, unknown>;
    try {
      if (!handler) throw new InvalidRequestError(`unknown command ${excerpt(verb)}`);
      reply = { ok: true, ...(await handler(parseJson(msg.data), msg)) };
    } catch (err) {
      reply = errorReply(err, log);
    }
    respondSafely(this.nc, msg, reply, log, this.outbox);
  }

  /** Stops taking requests and waits for the ones in flight to be answered. */
  async stop(): Promise<void> {
    this.sub?.unsubscribe();
    await Promise.allSettled([...this.inFlight]);
  }
}
