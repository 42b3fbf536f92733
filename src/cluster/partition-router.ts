/**
 * Runs a write on the leader of its queue's partition (DESIGN: "Any node accepts commands and
 * forwards them to the partition's leader"). On the leader the operation runs here; elsewhere
 * it goes to the leader's private subject `docket.forward.<node>.<queue>` as `{op, body}` and the
 * leader's answer comes back as it is. A queue nobody leads is taken by the node asking.
 */
import { headers, type Msg, type NatsConnection, type Subscription } from '@nats-io/nats-core';
import { replyBytes } from '../commands/reply.js';
import { coerceError, DocketError, fromErrorBody, UnavailableError, type ErrorBody } from '../errors.js';
import type { Logger } from '../logger.js';
import { subjects } from '../nats/subjects.js';
import { withinMs } from '../timing.js';
import type { LeaderInfo, Leadership } from './leadership.js';

/** A write run on the leader: the body as forwarded (JSON), the reply's fields. */
export type PartitionOperation = (queue: string, body: unknown) => Promise<Record<string, unknown>>;

/** How long a forwarded write may take on the leader (a large batch is many commits). */
const FORWARD_TIMEOUT_MS = 60_000;
/** How long the forwarding node waits to fold the leader's commits before it answers. */
const READ_YOUR_WRITES_MAX_MS = 2_000;
/** The leader's log position after a forwarded write, carried back beside the reply's fields. */
const FOLDED_TO = '_folded_to';
/**
 * The header a node puts on its refusal of a request forwarded to it as the leader when it no
 * longer leads the queue. The forwarding node then forgets the leader it had cached and looks
 * the lease up again at once: without it, a leader that gave a queue up (and is still there to
 * answer) was asked again and again until the cached lease ran out, up to a lease period (5 s)
 * during which every request through that node was answered `unavailable`.
 */
const NOT_LEADER = 'Docket-Not-Leader';

/** A forwarded request answered by a node that does not lead the queue (any more). */
class NotLeaderError extends Error {
  constructor(node: string, queue: string) {
    super(`node ${node} no longer leads ${queue}`);
    this.name = 'NotLeaderError';
  }
}

/** Answers a request forwarded to this node as the queue's leader while it does not lead it: `unavailable`, with NOT_LEADER. */
export function refuseAsNotLeader(msg: Msg, message: string): void {
  if (!msg.reply) return;
  const h = headers();
  h.set(NOT_LEADER, '1');
  try {
    msg.respond(replyBytes({ ok: false, error: new UnavailableError(message).toBody() }), { headers: h });
  } catch {
    // The connection is gone; the forwarding node's timeout tells it so.
  }
}

/** What the router needs of the node's log tail. */
export interface FoldedPosition {
  readonly position: number;
  waitFor(seq: number): Promise<void>;
}

interface Forwarded {
  readonly op: string;
  readonly body: unknown;
}

export class PartitionRouter {
  private readonly operations = new Map<string, PartitionOperation>();
  private readonly leaders = new Map<string, LeaderInfo>();
  private readonly inFlight = new Set<Promise<void>>();
  private sub: Subscription | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly leadership: Leadership,
    private readonly tail: FoldedPosition,
    private readonly log: Logger,
  ) {}

  register(op: string, operation: PartitionOperation): void {
    this.operations.set(op, operation);
  }

  async start(): Promise<void> {
    this.sub = this.nc.subscribe(subjects.forwardedInbox(this.leadership.node), {
      callback: (err, msg) => {
        if (err) return;
        const done = this.serve(msg).finally(() => this.inFlight.delete(done));
        this.inFlight.add(done);
      },
    });
    await this.nc.flush();
  }

  /** The queue's leader (this node's lease first, then a cached or fresh lookup that may take it). */
  async leaderOf(queue: string): Promise<LeaderInfo | null> {
    if (this.leadership.isLeader(queue)) return { node: this.leadership.node, expiresAt: Infinity };
    const cached = this.leaders.get(queue);
    if (cached && cached.expiresAt > Date.now()) return cached;
    const leader = await this.leadership.leaderOf(queue);
    // Only another node is cached: this node's own lease is `isLeader` above. A cached self
    // outlived a queue given up (relinquished, or let go as idle), and every request this node
    // routed went to its own inbox, to be refused there, until the cached lease ran out.
    if (leader && leader.node !== this.leadership.node) this.leaders.set(queue, leader);
    return leader;
  }

  /** Forgets a cached leader that did not answer. */
  forget(queue: string): void {
    this.leaders.delete(queue);
  }

  /**
   * Runs `here` when this node leads the queue, else `there(leader)`. Twice at most: a leader that
   * just stopped has no responders, and one that gave the queue up says so (`forward`), so the
   * lease is looked up again once. A DocketError is the leader's answer and passes through; any
   * other failure is `unavailable`.
   */
  async toLeader<T>(queue: string, here: () => Promise<T>, there: (leader: string) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const leader = await this.leaderOf(queue);
      if (!leader) throw new UnavailableError(`queue ${queue} has no leader yet; retry`);
      if (leader.node === this.leadership.node) return here();
      try {
        return await there(leader.node);
      } catch (err) {
        if (err instanceof DocketError) throw err;
        this.forget(queue);
        if (attempt >= 1 || !(err instanceof NotLeaderError || /no responders/i.test(coerceError(err).message))) {
          throw new UnavailableError(`the leader of ${queue} did not answer: ${coerceError(err).message}`, { cause: err });
        }
      }
    }
  }

  /**
   * Sends a request to `leader` as the queue's leader; throws NotLeaderError (not a DocketError:
   * toLeader looks the leader up again) when that node answers that it does not lead the queue.
   */
  async forward(leader: string, queue: string, subject: string, data: Uint8Array | string, timeoutMs: number): Promise<Msg> {
    const reply = await this.nc.request(subject, data, { timeout: timeoutMs });
    if (reply.headers?.has(NOT_LEADER)) throw new NotLeaderError(leader, queue);
    return reply;
  }

  /** Runs `op` on the queue's leader and returns its reply's fields; a refusal is thrown as its DocketError. */
  run(queue: string, op: string, body: unknown): Promise<Record<string, unknown>> {
    return this.toLeader(
      queue,
      () => this.local(queue, op, body),
      async (leader) => {
        const reply = await this.forward(leader, queue, subjects.forwarded(leader, queue), JSON.stringify({ op, body } satisfies Forwarded), FORWARD_TIMEOUT_MS);
        const answer = reply.json<{ ok: boolean; error?: ErrorBody } & Record<string, unknown>>();
        if (!answer.ok) throw fromErrorBody(answer.error ?? { code: 'unavailable', message: 'the leader answered without a reply' });
        const { ok: _ok, [FOLDED_TO]: foldedTo, ...fields } = answer;
        // Read-your-writes through this node: a `get` here right after sees what the leader wrote.
        if (typeof foldedTo === 'number') await withinMs(READ_YOUR_WRITES_MAX_MS, this.tail.waitFor(foldedTo));
        return fields;
      },
    );
  }

  private local(queue: string, op: string, body: unknown): Promise<Record<string, unknown>> {
    const operation = this.operations.get(op);
    if (!operation) return Promise.reject(new UnavailableError(`no operation ${op} on this node`));
    return operation(queue, body);
  }

  private async serve(msg: Msg): Promise<void> {
    const queue = subjects.forwardedLease(this.leadership.node, msg.subject);
    let reply: Record<string, unknown>;
    try {
      if (!this.leadership.isLeader(queue)) return refuseAsNotLeader(msg, `this node does not lead ${queue}; retry`);
      const { op, body } = msg.json<Forwarded>();
      reply = { ok: true, ...(await this.local(queue, op, body)), [FOLDED_TO]: this.tail.position };
    } catch (err) {
      if (!(err instanceof DocketError)) this.log.error({ err, queue }, 'forwarded write failed');
      reply = { ok: false, error: (err instanceof DocketError ? err : new UnavailableError(coerceError(err).message)).toBody() };
    }
    if (msg.reply) msg.respond(Buffer.from(JSON.stringify(reply)));
  }

  async stop(): Promise<void> {
    this.sub?.unsubscribe();
    await Promise.allSettled([...this.inFlight]);
  }
}
