/**
 * Request/reply for the SDK's Client and Worker: one inbox subscription and a map of the requests
 * in flight, as nats.js's own request() keeps, without what that costs per request. nats.js makes
 * an Error (a stack trace) for every answered request, whatever `noAsyncTraces` says, plus a
 * promise and a token per request; at concurrency 1 its request machinery took ~90 µs of the
 * client's and Worker's CPU per job (two requests), 10-27 µs of it on the job's path (the
 * worker reads its next job in a request's reply). Failures read as nats.js's: TimeoutError, and
 * RequestError with a NoRespondersError or PermissionViolationError as its cause.
 */
import { createInbox, errors, type Msg, type NatsConnection, type Subscription } from '@nats-io/nats-core';

interface InFlight {
  readonly subject: string;
  readonly resolve: (msg: Msg) => void;
  readonly reject: (err: Error) => void;
  readonly timer: NodeJS.Timeout;
}

/** nats-server's answer when nothing subscribes to a request's subject (no_responders). */
const NO_RESPONDERS = 503;

export class Requester {
  private inbox: string | undefined;
  private sub: Subscription | undefined;
  private next = 0;
  private closed = false;
  private readonly inFlight = new Map<number, InFlight>();

  constructor(private readonly nc: NatsConnection) {}

  /** Publishes `data` to `subject` and resolves with the first reply; rejects after `timeoutMs`. */
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Msg> {
    if (this.closed) return Promise.reject(new errors.RequestError('the client or worker is closed'));
    const inbox = this.inbox ?? this.listen();
    const token = ++this.next;
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.inFlight.delete(token);
        reject(new errors.TimeoutError());
      }, timeoutMs);
      this.inFlight.set(token, { subject, resolve, reject, timer });
      try {
        this.nc.publish(subject, data, { reply: `${inbox}.${token}` });
      } catch (err) {
        this.settle(token)?.reject(err instanceof Error ? err : new errors.RequestError(String(err)));
      }
    });
  }

  /** Subscribes to this requester's inbox on first use, and watches for errors that end requests. */
  private listen(): string {
    const inbox = createInbox((this.nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
    const prefix = inbox.length + 1;
    this.inbox = inbox;
    this.sub = this.nc.subscribe(`${inbox}.*`, {
      callback: (err, msg) => {
        // The inbox itself refused (a subscribe permission): nothing in flight can be answered.
        if (err) return this.failAll(() => true, err);
        const request = this.settle(Number(msg.subject.slice(prefix)));
        if (request === undefined) return; // answered late, after its timeout
        if (msg.data.length === 0 && msg.headers?.code === NO_RESPONDERS) {
          request.reject(new errors.RequestError(`no responders: '${request.subject}'`, { cause: new errors.NoRespondersError(request.subject) }));
        } else request.resolve(msg);
      },
    });
    void this.sub.closed.then(
      () => this.failAll(() => true, new errors.RequestError('connection closed')),
      (err: unknown) => this.failAll(() => true, err instanceof Error ? err : new errors.RequestError('connection closed')),
    );
    // A publish the server refuses (permissions) is reported on the connection's status, not to
    // the publisher: the requests to that subject fail at once, as nats.js's would.
    void (async () => {
      for await (const status of this.nc.status()) {
        // Closed on a connection its owner keeps: this listener goes at the next status (a
        // ping every few minutes at the latest).
        if (this.closed) break;
        if (status.type !== 'error' || !(status.error instanceof errors.PermissionViolationError)) continue;
        const refused = status.error;
        if (refused.operation === 'publish') this.failAll((request) => request.subject === refused.subject, new errors.RequestError(refused.message, { cause: refused }));
      }
    })().catch(() => undefined);
    return inbox;
  }

  /** Stops listening (on a connection the caller keeps open); requests in flight fail. */
  close(): void {
    this.closed = true;
    this.sub?.unsubscribe();
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
