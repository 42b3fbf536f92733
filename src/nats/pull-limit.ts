/**
 * How much one pull of a log read asks for. Apart from streams.ts so that the SDK, which loads
 * @nats-io/jetstream only when it reads the log, can import it without loading it.
 */
import type { NatsConnection } from '@nats-io/nats-core';

/** What the commits of one pull may add up to at most: half of what nats-server holds for a client (64 MiB by default). */
const PULL_BUDGET_BYTES = 32 * 1024 * 1024;

/**
 * Commits per pull of a log read (the node's tail, replay and audit, the SDK's `events()`): as
 * many as fit PULL_BUDGET_BYTES if each were as large as the server's max payload, which caps a
 * commit. Pulls of 1,000 or 10,000 commits of a log written by bulk submits (commits near the
 * max payload) asked for gigabytes: nats-server cut the reader as a slow consumer while it was
 * busy folding, the consumer started again from where it was, and a node with no checkpoint
 * never finished folding 200,000 such jobs (README "Checkpoints"). Not nats.js's byte limit:
 * with it (and its forced 100 messages a pull) reads of logs of small commits stalled for tens
 * of seconds (the audit tests timed out), so the bound is a message count from the max payload.
 */
export function pullLimit(nc: NatsConnection): { readonly max_messages: number } {
  const maxPayload = nc.info?.max_payload ?? 1024 * 1024;
  return { max_messages: Math.max(4, Math.min(1_000, Math.floor(PULL_BUDGET_BYTES / maxPayload))) };
}
