/**
 * Answering a request safely, for `docket.cmd.*` and `docket.work.*` alike. A reply must fit
 * the connection's max payload, or `msg.respond` throws; thrown outside a handler's `try`, that
 * stopped the node (issue 12). Here every reply is encoded, measured and, when too big, replaced
 * by a small error; and nothing thrown while sending ever leaves `respondSafely`.
 */
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { coerceError, DocketError, excerpt, InvalidRequestError, UnavailableError, type ErrorBody } from '../errors.js';
import type { Outbox } from '../nats/outbox.js';
import type { Logger } from '../logger.js';
import { valueWithinMs } from '../timing.js';

/** nats-server's default, for a connection that has no server info yet. */
export const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** Room kept under the max payload for what a reply wraps around its list (`ok`, a cursor, `truncated`). */
const ENVELOPE_SLACK = 1024;

/** An unexpected error's message is quoted up to this many characters. */
const MAX_ERROR_MESSAGE_CHARS = 1024;

/** The largest payload the server takes on this connection. */
export function maxPayload(nc: NatsConnection): number {
  return nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD;
}

/** Bytes a reply's list may fill: the max payload less the room its envelope needs. */
export function replyBudget(nc: NatsConnection): number {
  return Math.max(0, maxPayload(nc) - ENVELOPE_SLACK);
}

/** Buffer.from for the reason in encodeEnvelope (src/nats/codec.ts). */
export function replyBytes(value: Record<string, unknown>): Uint8Array {
  return Buffer.from(JSON.stringify(value));
}

/** The reply for a failed request: a DocketError's body, anything else `unavailable` (and logged). */
export function errorReply(err: unknown, log: Logger): Record<string, unknown> {
  if (err instanceof DocketError) return { ok: false, error: boundedBody(err.toBody()) };
  const error = coerceError(err);
  log.error({ err: error }, 'request failed');
  return { ok: false, error: { code: 'unavailable', message: excerpt(error.message, MAX_ERROR_MESSAGE_CHARS) } };
}

/** Messages are built from short quotes already; this is the backstop for one that is not. */
function boundedBody(body: ErrorBody): ErrorBody {
  return body.message.length <= MAX_ERROR_MESSAGE_CHARS ? body : { ...body, message: excerpt(body.message, MAX_ERROR_MESSAGE_CHARS) };
}

/**
 * A reply's bytes as a requester on `nc` may receive them: a reply over the max payload is
 * replaced by a small `invalid_request` naming the limit, and one that cannot be encoded (a bug)
 * by its error. Used for replies over NATS and for those given in process (an embedded worker or
 * client), so both answer alike wherever the queue's leader is.
 */
export function boundedReplyBytes(nc: NatsConnection, reply: Record<string, unknown> | Uint8Array, log: Logger): Uint8Array {
  const limit = maxPayload(nc);
  let bytes: Uint8Array;
  try {
    bytes = reply instanceof Uint8Array ? reply : replyBytes(reply);
  } catch (err) {
    // JSON.stringify of a reply can only fail on a bug (a cycle, a BigInt): still answer.
    bytes = replyBytes(errorReply(err, log));
  }
  if (bytes.length > limit) {
    log.debug({ bytes: bytes.length, limit }, 'reply over the max payload, answered with an error');
    bytes = replyBytes({ ok: false, error: new InvalidRequestError(`the reply (${bytes.length} bytes) exceeds the server's max payload of ${limit} bytes; ask for less`, { details: { max_payload: limit } }).toBody() });
  }
  return bytes;
}

/**
 * Sends `reply` (an object, or bytes already encoded, e.g. a leader's answer being passed on)
 * to `msg`. A reply over the max payload is replaced by a small `invalid_request` naming the
 * limit (asking for less is the fix, so retrying as is cannot help); a send that fails anyway is
 * answered `unavailable` once more, then only logged. Never throws.
 */
export function respondSafely(nc: NatsConnection, msg: Msg, reply: Record<string, unknown> | Uint8Array, log: Logger, outbox?: Outbox, first = false): void {
  if (!msg.reply) return;
  const bytes = boundedReplyBytes(nc, reply, log);
  if (outbox) {
    // Sent with the turn's other publishes (live events, other replies): one socket write.
    if (first) outbox.publishFirst(msg.reply, bytes);
    else outbox.publish(msg.reply, bytes);
    return;
  }
  try {
    msg.respond(bytes);
  } catch (err) {
    log.warn({ err: coerceError(err), bytes: bytes.length }, 'reply could not be sent');
    try {
      msg.respond(replyBytes({ ok: false, error: new UnavailableError('the reply could not be sent; retry').toBody() }));
    } catch {
      // The connection is gone; the requester's timeout tells it so.
    }
  }
}

/**
 * The reply bytes of a request answered in this process (an embedded worker's or client's),
 * handled as one from NATS is: tracked in `inFlight` (so stopping waits for it), answered
 * `unavailable` if it takes longer than `timeoutMs` (the requester retries, as after a NATS
 * timeout), and capped like a reply over NATS (`boundedReplyBytes`).
 */
export async function answeredInProcess(
  nc: NatsConnection,
  inFlight: Set<Promise<void>>,
  answered: Promise<Record<string, unknown>>,
  timeoutMs: number,
  log: Logger,
): Promise<Uint8Array> {
  const done = answered.then(() => undefined).finally(() => inFlight.delete(done));
  inFlight.add(done);
  const reply = await valueWithinMs(timeoutMs, answered, () => errorReply(new UnavailableError(`no answer within ${timeoutMs} ms; retry`), log));
  return boundedReplyBytes(nc, reply, log);
}
