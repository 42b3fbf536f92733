/**
 * Serves `docket.cmd.<verb>` (request/reply JSON) in the `docket` queue group, so any node
 * answers and each request is answered once. Replies are `{ ok: true, ... }` or
 * `{ ok: false, error: { code, message, details? } }`.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { excerpt, InvalidRequestError } from '../errors.js';
import { childLogger, type Logger } from '../logger.js';
import { COMMAND_PREFIX, COMMAND_QUEUE_GROUP, subjects } from '../nats/subjects.js';
import { answeredInProcess, errorReply, respondSafely } from './reply.js';
import type { Outbox } from '../nats/outbox.js';
import { parseJson } from './validate.js';

/** A handler gets the parsed JSON body and returns the reply's fields (without `ok`). */
export type CommandHandler = (body: unknown) => Promise<Record<string, unknown>> | Record<string, unknown>;

/** The commands without NATS, for a client in the node's own process. */
export interface LocalCommands {
  /** One command's body (JSON bytes) in, its reply (JSON bytes) out: as `docket.cmd.<verb>` would answer it. */
  local(verb: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
}

export class CommandService implements LocalCommands {
  private readonly handlers = new Map<string, CommandHandler>();
  private readonly verbLogs = new Map<string, Logger>();
  private sub: Subscription | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  /** Stopped: a local command goes over NATS, to another node. */
  private stopped = false;

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
    const log = this.logFor(verb);
    respondSafely(this.nc, msg, await this.answer(verb, msg.data, log), log, this.outbox);
  }

  /**
   * The verb comes from the subject: logged and quoted only when it is one of ours. One child
   * logger per verb, made once: a pino child per request cost ~6 µs of the node's CPU per job at
   * concurrency 1 (`npm run bench -- --only latency --profile`).
   */
  private logFor(verb: string): Logger {
    if (!this.handlers.has(verb)) return this.log;
    let log = this.verbLogs.get(verb);
    if (log === undefined) this.verbLogs.set(verb, (log = childLogger(this.log, { command: verb })));
    return log;
  }

  private async answer(verb: string, data: Uint8Array, log: Logger): Promise<Record<string, unknown>> {
    const handler = this.handlers.get(verb);
    try {
      if (!handler) throw new InvalidRequestError(`unknown command ${excerpt(verb)}`);
      return { ok: true, ...(await handler(parseJson(data))) };
    } catch (err) {
      return errorReply(err, log);
    }
  }

  /**
   * A command of a client in this node's process (README "Embedded workers"): answered here
   * without a NATS round trip (and over NATS once this node stops). Bytes in and out, as on the
   * wire: the client and the store never share an object.
   */
  async local(verb: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    if (this.stopped) return (await this.nc.request(subjects.command(verb), data, { timeout: timeoutMs })).data;
    const log = this.logFor(verb);
    // A resend with the same command id after an `unavailable` is safe.
    return answeredInProcess(this.nc, this.inFlight, this.answer(verb, data, log), timeoutMs, log);
  }

  /** Stops taking requests and waits for the ones in flight to be answered. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.sub?.unsubscribe();
    await Promise.allSettled([...this.inFlight]);
  }
}
