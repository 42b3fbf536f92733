/**
 * Creates the DOCKET stream when it is missing (idempotent). File storage, limits retention;
 * replicas 1 alone or 3 in a cluster. The duplicate window bounds `Nats-Msg-Id` dedupe; after it,
 * derived ids and the handler's own history check keep resent commands safe.
 */
import { jetstreamManager, type JetStreamManager, RetentionPolicy, StorageType, DiscardPolicy } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { EVENT_SUBJECTS, STREAM } from './subjects.js';

const TWO_MINUTES_NS = 2 * 60 * 1_000_000_000;

export interface StreamOptions {
  /** @defaultValue 1 */
  readonly replicas?: number;
}

export async function ensureStream(nc: NatsConnection, options: StreamOptions = {}): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(STREAM);
  } catch (err) {
    if (!(err instanceof Error) || !/stream not found/i.test(err.message)) throw err;
    try {
      await jsm.streams.add({
        name: STREAM,
        subjects: [EVENT_SUBJECTS],
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
    }
  }
  return jsm;
}
