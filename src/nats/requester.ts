/**
 * Request/reply for the SDK's Client and Worker: one inbox subscription and a map of the requests
 * in flight, as nats.js's own request() keeps, without what that costs per request. nats.js makes
 * an Error (a stack trace) for every answered request, whatever `noAsyncTraces` says, plus a
 * promise and a token per request; at concurrency 1 its request machinery took ~90 µs of the
 * client's and Worker's CPU per job (two requests), 10-27 µs of it on the job's path (the
 * worker reads its next job in a request's reply). Failures read as nats.js's: TimeoutError, and
 * RequestError with a NoRespondersError or PermissionViolationError as its cause.
 */
import { createInbox, errors, type Msg, type NatsConnection, type Status, type Subscription } from '@nats-io/nats-core';
import { NO_RESPONDERS } from './subjects.js';

interface InFlight {
  readonly subject: string;
  /** The inbox its reply comes to: when that subscription ends, the request cannot be answered. */
  readonly inbox: string;
  readonly resolve: (msg: Msg) => void;
  readonly reject: (err: Error) => void;
  readonly timer: NodeJS.Timeout;
}

/** The inbox subscription and the watch on the connection's errors, made on first use. */
interface Listening {
  readonly inbox: string;
  readonly sub: Subscription;
  /** Ends the watch on the connection's status (nats.js's iterator has `stop`). */
  readonly statuses: AsyncIterable<Status> & { stop?: () => void };
}

export class Requester {
  private listening: Listening | undefined;
  private next = 0;
  private readonly inFlight = new Map<number, InFlight>();

  constructor(private readonly nc: NatsConnection) {}

  /** Publishes `data` to `subject` and resolves with the first reply; rejects after `timeoutMs`. */
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Msg> {
    let inbox: string;
    try {
      inbox = (this.listening ??= this.listen()).inbox;
    } catch (err) {
      // The connection is closed: nats.js's request() says so the same way.
      return Promise.reject(err instanceof Error ? err : new errors.RequestError(String(err)));
    }
    const token = ++this.next;
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.inFlight.delete(token);
        reject(new errors.TimeoutError());
      }, timeoutMs);
      this.inFlight.set(token, { subject, inbox, resolve, reject, timer });
      try {
        this.nc.publish(subject, data, { reply: `${inbox}.${token}` });
      } catch (err) {
        this.settle(token)?.reject(err instanceof Error ? err : new errors.RequestError(String(err)));
      }
    });
  }

  /**
   * Stops listening, on a connection its owner keeps open: requests in flight fail, and a later
   * request listens again.
   */
  close(): void {
    const listening = this.listening;
    if (listening === undefined) return;
    this.listening = undefined;
    this.end(listening, new errors.RequestError('the client or worker was closed'));
  }

  private listen(): Listening {
    const inbox = createInbox((this.nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
    const prefix = inbox.length + 1;
    const sub = this.nc.subscribe(`${inbox}.*`, {
      callback: (err, msg) => {
        // The inbox itself refused (a subscribe permission): nothing in flight can be answered,
        // and the next request subscribes again, as nats.js's request() does.
        if (err) return this.lost(listening, new errors.RequestError(err.message, { cause: err }));
        const request = this.settle(Number(msg.subject.slice(prefix)));
        if (request === undefined) return; // answered late, after its timeout
        if (msg.data.length === 0 && msg.headers?.code === NO_RESPONDERS) {
          request.reject(new errors.RequestError(`no responders: '${request.subject}'`, { cause: new errors.NoRespondersError(request.subject) }));
        } else request.resolve(msg);
      },
    });
    const listening: Listening = { inbox, sub, statuses: this.nc.status() };
    void sub.closed.then(
      () => this.lost(listening, new errors.RequestError('connection closed')),
      (err: unknown) => this.lost(listening, new errors.RequestError('connection closed', { cause: err })),
    );
    // A publish the server refuses (permissions) is reported on the connection's status, not to
    // the publisher: the requests to that subject fail at once, as nats.js's would.
    void (async () => {
      for await (const status of listening.statuses) {
        if (status.type !== 'error' || !(status.error instanceof errors.PermissionViolationError)) continue;
        const refused = status.error;
        if (refused.operation === 'publish') this.failAll((request) => request.subject === refused.subject, new errors.RequestError(refused.message, { cause: refused }));
      }
    })().catch(() => undefined);
    return listening;
  }

  /** The inbox's subscription ended on its own: its requests fail; the next request listens again. */
  private lost(listening: Listening, err: Error): void {
    if (this.listening === listening) this.listening = undefined;
    this.end(listening, err);
  }

  private end(listening: Listening, err: Error): void {
    listening.statuses.stop?.();
    if (!listening.sub.isClosed()) listening.sub.unsubscribe();
    this.failAll((request) => request.inbox === listening.inbox, err);
  }

  private settle(token: number): InFlight | undefined {
    const request = this.inFlight.get(token);
    if (request === undefined) return undefined;
    this.inFlight.delete(token);
    clearTimeout(request.timer);
    return request;
  }

  private failAll(which: (request: InFlight) => boolean, err: Error): void {
    for (const [token, request] of this.inFlight) if (which(request)) this.settle(token)?.reject(err);
  }
}
