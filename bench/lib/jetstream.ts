/**
 * Raw JetStream paths for the substrate rows: a lean append (core publish with a reply subject on
 * one inbox subscription, the PubAck parsed by hand, a window of messages in flight) and an
 * ordered-consumer reader with large pulls. Also the stream set-up the scenarios share.
 */
import { connect } from '@nats-io/transport-node';
import { createInbox, headers as natsHeaders, type NatsConnection, type MsgHdrs } from '@nats-io/nats-core';
import { startNatsServer } from '../../test/support/nats-server.js';
import { measured, type Measurement } from './harness.js';
import { jetstream, jetstreamManager, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import type { Envelope } from '../../machines/index.js';
import { encodeEvent } from '../../src/nats/codec.js';

export const LOG_STREAM = 'DOCKET';

export async function connectBench(url: string, name: string): Promise<NatsConnection> {
  return connect({ servers: url, name, maxReconnectAttempts: 10 });
}

/** (Re)creates `DOCKET` on `docket.evt.>` as docket does: file storage, 2-minute duplicate window. */
export async function freshStream(nc: NatsConnection, name = LOG_STREAM, subjects = ['docket.evt.>']): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.delete(name);
  } catch {
    /* not there */
  }
  await jsm.streams.add({
    name,
    subjects,
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    num_replicas: 1,
    duplicate_window: 2 * 60 * 1_000_000_000,
    allow_direct: true,
  });
  return jsm;
}

export interface LeanAppendItem {
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly headers?: MsgHdrs;
}

/**
 * Publishes `n` messages with at most `window` awaiting their PubAck. Each PubAck is checked by
 * hand for an error (a duplicate or a wrong expected sequence would be a bench bug, so it throws).
 */
export function leanAppend(nc: NatsConnection, n: number, window: number, item: (i: number) => LeanAppendItem): Promise<void> {
  const inbox = createInbox();
  const prefixLength = inbox.length + 1;
  const decoder = new TextDecoder();
  return new Promise<void>((resolve, reject) => {
    let sent = 0;
    let acked = 0;
    let failed = false;
    const sub = nc.subscribe(`${inbox}.*`, {
      callback: (err, msg) => {
        if (failed) return;
        if (err) return fail(err);
        const text = decoder.decode(msg.data);
        // A PubAck is `{"stream":"DOCKET","seq":N}` (plus `"duplicate":true`); an error has "error".
        if (text.length === 0 || text.includes('"error"') || text.includes('"duplicate"')) {
          return fail(new Error(`append ${msg.subject.slice(prefixLength)} refused: ${text || `status ${msg.headers?.code}`}`));
        }
        acked++;
        if (acked === n) {
          sub.unsubscribe();
          resolve();
        } else if (sent < n) {
          send();
        }
      },
    });
    function fail(err: Error): void {
      failed = true;
      sub.unsubscribe();
      reject(err);
    }
    function send(): void {
      const i = sent++;
      const it = item(i);
      nc.publish(it.subject, it.payload, it.headers ? { reply: `${inbox}.${i}`, headers: it.headers } : { reply: `${inbox}.${i}` });
    }
    if (n === 0) return resolve();
    while (sent < Math.min(window, n)) send();
  });
}

/**
 * The ceiling of a bulk submit of `n` jobs: the same number of appends, one per job as docket
 * makes them (a job.submitted envelope of the workload's params on a new job subject, a unique
 * `Nats-Msg-Id`, expected sequence 0), on the lean path alone, `window` in flight, into a fresh
 * nats-server. No docket code runs: a bulk submit cannot go faster than its appends do.
 */
export async function leanAppendCeiling(n: number, window: number, envelope: (i: number) => { subject: string; event: Envelope }): Promise<Measurement> {
  const server = await startNatsServer();
  const nc = await connectBench(server.url, 'bench-ceiling');
  try {
    await freshStream(nc);
    const m = await measured({ bench: process.pid, nats: server.process.pid! }, () =>
      leanAppend(nc, n, window, (i) => {
        const { subject, event } = envelope(i);
        return newJobAppend(subject, event);
      }),
    );
    return { values: { rate: n / m.seconds }, cpu: m.cpu, extra: { appends: n, in_flight: window } };
  } finally {
    await nc.close();
    await server.stop();
  }
}

/** One append as docket makes it for a new job: its envelope, docket's headers, expected sequence 0. */
export function newJobAppend(subject: string, event: Envelope): LeanAppendItem {
  return { subject, payload: envelopeBytes(event), headers: appendHeaders(event.id, 0) };
}

/** Docket's append headers, as src/store/event-store.ts sends them: dedupe by event id, the subject's expected last sequence, the stream. */
export function appendHeaders(msgId: string, expectedSeq: number): MsgHdrs {
  const h = natsHeaders();
  h.append('Nats-Msg-Id', msgId);
  h.append('Nats-Expected-Last-Subject-Sequence', String(expectedSeq));
  h.append('Nats-Expected-Stream', LOG_STREAM);
  return h;
}

/** An envelope's bytes as docket encodes them (src/nats/codec.ts: Buffer.from, see bench/encode.ts). */
export function envelopeBytes(event: Envelope): Uint8Array {
  // As a node stores it (a submit without the fields that hold their absent values).
  return Buffer.from(encodeEvent(event));
}

/**
 * Reads the whole stream with an ordered consumer in pulls of `pull` messages, calling `onMessage`
 * for each, and stops at the last sequence read up front (not at pending 0, which is racy).
 */
export async function readAll(
  nc: NatsConnection,
  pull: number,
  onMessage: (subject: string, data: Uint8Array, seq: number) => void,
  stream = LOG_STREAM,
): Promise<number> {
  const jsm = await jetstreamManager(nc);
  const last = (await jsm.streams.info(stream)).state.last_seq;
  if (last === 0) return 0;
  const js = jetstream(nc);
  const consumer = await js.consumers.get(stream);
  const messages = await consumer.consume({ max_messages: pull });
  let count = 0;
  try {
    for await (const m of messages) {
      onMessage(m.subject, m.data, m.seq);
      count++;
      if (m.seq >= last) break;
    }
  } finally {
    messages.stop();
  }
  return count;
}
