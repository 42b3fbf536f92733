/**
 * `Client.live()`'s reading of live commits: from core NATS (`docket.live.q.<queue>`), and for a
 * client embedded in a node (`local: node`) also straight from that node as it commits, with no
 * trip through nats-server. Such a client subscribes on the node's own publishing connection
 * (LocalLive.nc), so the node's commits do not come back over NATS as well, only other leaders';
 * where they still could (a node given a connection with echo), each commit is yielded once,
 * whichever way came first.
 */
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import type { Commit, Envelope } from '../../machines/index.js';
import { decodeCommit, envelopeProblem, isJobEvent } from '../nats/codec.js';
import { LIVE_SEQ_HEADER, queuePartition, subjects } from '../nats/subjects.js';
import type { EventPosition } from './client.js';

/** A live commit as the leader published it: its partition, stream sequence and stored bytes. */
export type LiveCommitListener = (partition: string, seq: number, payload: Uint8Array) => void;

/** What a node in this process offers its embedded clients: its commits, as it makes them. */
export interface LocalLive {
  /** Calls `listener` with each commit this node writes, once acknowledged; returns the unsubscribe. */
  subscribe(listener: LiveCommitListener): () => void;
  /**
   * The connection the node publishes its live commits on, where embedded clients subscribe to
   * the other leaders' commits; the node owns it (subscribe on it, never close it). Opened with
   * `noEcho` when the node opened it: nats-server then does not send the node's own commits back,
   * which `subscribe` already handed over in process. Without it, the client's own connection.
   */
  readonly nc?: NatsConnection;
}

/** A live event: the committed envelope with its position in the log. */
export type LiveEvent = Envelope & { readonly position: EventPosition };

export interface LiveOptions {
  /** Only this queue's jobs. */
  readonly queue?: string;
  /** Only these event types. */
  readonly types?: readonly string[];
  /** Unsubscribes (ends the iteration) when aborted. */
  readonly signal?: AbortSignal;
}

export type LiveEvents = AsyncGenerator<LiveEvent> & { readonly ready: Promise<void> };

interface Arrived {
  readonly partition: string;
  readonly seq: number;
  readonly payload: Uint8Array;
}

export function readLive(nc: NatsConnection, local: LocalLive | undefined, options: LiveOptions): LiveEvents {
  const liveNc = local?.nc ?? nc;
  const wanted = options.queue === undefined ? (partition: string) => partition.startsWith('q.') : ((p) => (partition: string) => partition === p)(queuePartition(options.queue));
  const types = options.types === undefined ? undefined : new Set(options.types);
  const named = types === undefined ? undefined : [...types].map((type) => JSON.stringify(type));
  const arrived: Arrived[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const push = (item: Arrived): void => {
    arrived.push(item);
    wake?.();
  };
  const sub: Subscription = liveNc.subscribe(subjects.liveQueues(options.queue), {
    callback: (err, m) => {
      if (err === null) push({ partition: subjects.partitionOfLive(m.subject), seq: Number(m.headers?.get(LIVE_SEQ_HEADER)), payload: m.data });
    },
  });
  const unlisten = local?.subscribe((partition, seq, payload) => {
    if (wanted(partition)) push({ partition, seq, payload });
  });
  const end = (): void => {
    ended = true;
    sub.unsubscribe();
    unlisten?.();
    wake?.();
  };
  options.signal?.addEventListener('abort', end, { once: true });
  void sub.closed.then(end, end);
  async function* read(): AsyncGenerator<LiveEvent> {
    // Per partition, the last commit yielded: its leader publishes in order, so a sequence not
    // past it is the same commit come the other way (in process, then over NATS, where the
    // connection echoes the node's own publishes). Across a change of leader, an old leader's
    // late commit that arrives after the new one's is dropped too: live events are a view, and
    // `events()` reads the log itself.
    const last = new Map<string, number>();
    try {
      for (;;) {
        const next = arrived.shift();
        if (next === undefined) {
          if (ended) return;
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
          continue;
        }
        if (!Number.isSafeInteger(next.seq) || next.seq < 1 || next.seq <= (last.get(next.partition) ?? 0)) continue;
        if (named !== undefined && !namesAny(next.payload, named)) {
          // Passed over as yielded: a late commit of an old leader behind it is dropped, as ever.
          last.set(next.partition, next.seq);
          continue;
        }
        let commit: Commit;
        try {
          commit = decodeCommit(next.payload);
        } catch {
          continue; // not a docket commit: someone else publishing on the subject
        }
        last.set(next.partition, next.seq);
        for (const event of jobEventsOf(next.seq, commit)) if (!types || types.has(event.type)) yield event;
      }
    } finally {
      end();
    }
  }
  return Object.assign(read(), { ready: liveNc.flush() });
}

/**
 * Whether the commit's bytes hold one of these JSON strings. An event's type is stored as one
 * (JSON.stringify escapes none of a type's characters), so a commit that names none of the wanted
 * types holds none of their events and is passed over unparsed: a watcher of completions decodes
 * half the commits of a job it follows (~30 µs of the client's CPU per job in the latency loop).
 */
function namesAny(payload: Uint8Array, named: readonly string[]): boolean {
  const bytes = Buffer.isBuffer(payload) ? payload : Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  return named.some((json) => bytes.includes(json));
}

/** The job events of a commit, each with its position. */
function jobEventsOf(seq: number, commit: Commit): LiveEvent[] {
  const events: LiveEvent[] = [];
  commit.events.forEach((event, index) => {
    if (envelopeProblem(event) === null && isJobEvent(event)) events.push({ position: { seq, index }, ...event });
  });
  return events;
}
