/** Connects to NATS; the one place a connection is opened for a node, client or CLI. */
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { fromErrorBody, InvalidRequestError, type ErrorBody } from '../errors.js';
import type { Logger } from '../logger.js';

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

export interface ConnectOptions {
  /** @defaultValue DEFAULT_NATS_URL */
  readonly servers?: string | string[];
  readonly name?: string;
  /** Fail instead of retrying when nothing listens. @defaultValue true */
  readonly failFast?: boolean;
  /** Do not deliver this connection's own publishes to its own subscriptions. @defaultValue false */
  readonly noEcho?: boolean;
}

export async function connectNats(options: ConnectOptions = {}): Promise<NatsConnection> {
  return connect({
    servers: options.servers ?? DEFAULT_NATS_URL,
    ...(options.name === undefined ? {} : { name: options.name }),
    ...(options.noEcho ? { noEcho: true } : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    // nats.js otherwise makes an Error (a stack trace) at every request and timer, in advance, in
    // case it fails: its Errors took 10% of the CPU samples of a client and Worker at concurrency
    // 1, and 4% with this option (what is left, it makes per answered request whatever the
    // option: the SDK's requests go through src/nats/requester.ts instead). A failed request
    // still gets its error, made when it fails; docket's errors name the request by code and
    // subject anyway.
    noAsyncTraces: true,
  });
}

/**
 * Logs one line when the connection drops (warn, with the server) and one when it is back
 * (info, with the server and how long it was out), so an outage reads as one, not as a scatter
 * of timeouts from whatever was in flight. Runs until the connection closes.
 */
export function watchConnection(nc: NatsConnection, log: Logger, now: () => number = Date.now): void {
  void (async () => {
    let lostAt: number | undefined;
    for await (const status of nc.status()) {
      if (status.type === 'disconnect' && lostAt === undefined) {
        lostAt = now();
        log.warn({ server: status.server }, 'NATS connection lost; reconnecting');
      } else if (status.type === 'reconnect') {
        const outageMs = lostAt === undefined ? 0 : now() - lostAt;
        log.info({ server: status.server, outageMs }, 'NATS connection restored');
        lostAt = undefined;
      }
    }
  })().catch((err: unknown) => log.debug({ err }, 'connection status watch ended'));
}

/**
 * A request body as bytes, refused as `invalid_request` naming the limit when it is over the
 * server's max payload: nats.js would throw a bare InvalidArgumentError, which reads as an
 * outage, and retrying it cannot help.
 */
export function requestBytes(nc: NatsConnection, body: unknown): Uint8Array {
  const bytes = Buffer.from(JSON.stringify(body));
  const limit = nc.info?.max_payload;
  if (limit !== undefined && bytes.length > limit) {
    throw new InvalidRequestError(`the request (${bytes.length} bytes) exceeds the server's max payload of ${limit} bytes`, { details: { max_payload: limit } });
  }
  return bytes;
}

/** A reply's fields (`{ ok: true, ... }`), or the DocketError it carries: how the SDK reads every answer, over NATS or in process. */
export function replyFields<T>(data: Uint8Array): T {
  const reply = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8')) as { ok: boolean; error?: ErrorBody } & T;
  if (!reply.ok) throw fromErrorBody(reply.error ?? { code: 'unavailable', message: 'reply without error' });
  return reply;
}
