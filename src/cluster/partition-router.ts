/**
 * Runs a write on the leader of its queue's partition (DESIGN: "Any node accepts commands and
 * forwards them to the partition's leader"). On the leader the operation runs here; elsewhere
 * it goes to the leader's private subject `docket.forward.<node>.<queue>` as `{op, body}` and the
 * leader's answer comes back as it is. A queue nobody leads is taken by the node asking.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
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
    if (leader) this.leaders.set(queue, leader);
    return leader;
  }

  /** Forgets a cached leader that did not answer. */
  forget(queue: string): void {
    this.leaders.delete(queue);
  }

  /**
   * Runs `here` when this node leads the queue, else `there(leader)`. Twice at most: a leader that
   * just stopped has no responders, so the lease is looked up again once. A DocketError is the
   * leader's answer and passes through; any other failure is `unavailable`.
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
        if (attempt >= 1 || !/no responders/i.test(coerceError(err).message)) {
          throw new UnavailableError(`the leader of ${queue} did not answer: ${coerceError(err).message}`, { cause: err });
        }
      }
    }
  }

  /** Runs `op` on the queue's leader and returns its reply's fields; a refusal is thrown as its DocketError. */
  run(queue: string, op: string, body: unknown): Promise<Record<string, unknown>> {
    return this.toLeader(
      queue,
      () => this.local(queue, op, body),
      async (leader) => {
        const reply = await this.nc.request(subjects.forwarded(leader, queue), JSON.stringify({ op, body } satisfies Forwarded), { timeout: FORWARD_TIMEOUT_MS });
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
      if (!this.leadership.isLeader(queue)) throw new UnavailableError(`this node does not lead ${queue}; retry`);
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
