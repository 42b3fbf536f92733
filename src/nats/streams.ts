/**
 * Creates the DOCKET stream when it is missing (idempotent). File storage, limits retention;
 * replicas 1 alone or 3 in a cluster. The duplicate window bounds `Nats-Msg-Id` dedupe; after it,
 * derived ids and the handler's own history check keep resent commands safe.
 */
import { jetstreamManager, type JetStreamManager, RetentionPolicy, StorageType, DiscardPolicy } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { InvalidRequestError } from '../errors.js';
import { LOG_SUBJECTS, STREAM } from './subjects.js';

const TWO_MINUTES_NS = 2 * 60 * 1_000_000_000;

export interface StreamOptions {
  /** @defaultValue 1 */
  readonly replicas?: number;
}

export async function ensureStream(nc: NatsConnection, options: StreamOptions = {}): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  try {
    const info = await jsm.streams.info(STREAM);
    assertLogV2(info.config.subjects ?? []);
  } catch (err) {
    if (!(err instanceof Error) || !/stream not found/i.test(err.message)) throw err;
    try {
      await jsm.streams.add({
        name: STREAM,
        subjects: [LOG_SUBJECTS],
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        discard: DiscardPolicy.Old,
        num_replicas: options.replicas ?? 1,
        duplicate_window: TWO_MINUTES_NS,
        allow_direct: true,
      });
    } catch (addErr) {
      // Another node created it between our info and add: that is the goal, not an error.
      if (!(addErr instanceof Error) || !/already in use|already exists/i.test(addErr.message)) throw addErr;
      assertLogV2((await jsm.streams.info(STREAM)).config.subjects ?? []);
    }
  }
  return jsm;
}

/**
 * A DOCKET stream of another log version is refused, never adopted: v1's stream binds
 * `docket.evt.>`, where v2 publishes live events (with `liveEvents: 'each'`), and would store them all.
 */
export function assertLogV2(streamSubjects: readonly string[]): void {
  if (streamSubjects.length === 1 && streamSubjects[0] === LOG_SUBJECTS) return;
  throw new InvalidRequestError(
    `stream ${STREAM} binds ${streamSubjects.join(', ') || 'no subjects'}, not ${LOG_SUBJECTS}: it is not a docket log v2 stream. ` +
      `Move to a fresh stream: export the old log if you need it (docket export with the old version), then delete it (nats stream rm ${STREAM}) or use another NATS account, and start docket again.`,
    { details: { stream: STREAM, subjects: [...streamSubjects] } },
  );
}
