/**
 * Per-queue leadership: a lease in the KV bucket `docket_leaders`, held by compare-and-set on the
 * key's revision, with the expiry time stored in the value (nats-server 2.9 ignores per-key TTL).
 * The leader renews at a third of the lease; another node takes over once the stored expiry has
 * passed. Leases use wall-clock time (they are compared across processes), not the injected
 * clock that job logic uses.
 */
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logger.js';
import { LEADERS_BUCKET } from '../nats/subjects.js';

interface LeaseValue {
  readonly node: string;
  readonly expires_at: number;
}

export interface LeaderInfo {
  readonly node: string;
  readonly expiresAt: number;
}

/** A queue's leadership lease, renewed every third of it; a takeover waits at most this long. */
export const DEFAULT_LEADERSHIP_LEASE_MS = 5_000;

export type LeadershipListener = (queue: string, leading: boolean) => void;

export class Leadership {
  private kv: KV | undefined;
  /**
   * Queues this node leads, with the KV revision of its lease and its epoch: the revision at
   * which this node took it. KV revisions only grow, so a later leader's epoch is larger.
   */
  private readonly held = new Map<string, { revision: number; expiresAt: number; epoch: number }>();
  private readonly listeners: LeadershipListener[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly known = new Set<string>();

  /** When each led queue was first seen idle (nothing to lead) since it was last busy. */
  private readonly idleSince = new Map<string, number>();

  constructor(
    private readonly nc: NatsConnection,
    readonly node: string,
    private readonly log: Logger,
    readonly leaseMs = DEFAULT_LEADERSHIP_LEASE_MS,
    private readonly replicas = 1,
    /**
     * Whether a queue has nothing to lead (no live job, no waiting claim, nothing being written).
     * A queue idle for a whole lease period is let go, and an idle one is not competed for: a
     * lease renewed forever for every queue name ever seen would cost KV writes without end.
     */
    private readonly isIdle: (queue: string) => boolean = () => false,
  ) {}

  async start(): Promise<void> {
    this.kv = await new Kvm(this.nc).create(LEADERS_BUCKET, { history: 1, replicas: this.replicas });
    this.timer = setInterval(() => void this.tick(), Math.max(100, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
  }

  onChange(listener: LeadershipListener): void {
    this.listeners.push(listener);
  }

  isLeader(queue: string): boolean {
    const lease = this.held.get(queue);
    return lease !== undefined && lease.expiresAt > Date.now();
  }

  /** The epoch of this node's lease on `queue` (0 when it does not lead it). */
  epochOf(queue: string): number {
    return this.held.get(queue)?.epoch ?? 0;
  }

  leading(): string[] {
    return [...this.held.keys()];
  }

  /** Remembers a queue so this node competes for it on every tick. */
  watch(queue: string): void {
    this.known.add(queue);
  }

  /** The current leader of `queue` (null when none holds a live lease). Tries to take it when free. */
  async leaderOf(queue: string): Promise<LeaderInfo | null> {
    this.watch(queue);
    if (this.isLeader(queue)) return { node: this.node, expiresAt: this.held.get(queue)!.expiresAt };
    const entry = await this.kv!.get(queue);
    const value = entry && entry.length > 0 ? (entry.json() as LeaseValue) : null;
    if (value && value.expires_at > Date.now() && value.node !== this.node) return { node: value.node, expiresAt: value.expires_at };
    if (await this.acquire(queue)) return { node: this.node, expiresAt: this.held.get(queue)!.expiresAt };
    const again = await this.kv!.get(queue);
    const winner = again && again.length > 0 ? (again.json() as LeaseValue) : null;
    return winner && winner.expires_at > Date.now() ? { node: winner.node, expiresAt: winner.expires_at } : null;
  }

  private async acquire(queue: string): Promise<boolean> {
    const kv = this.kv!;
    const expiresAt = Date.now() + this.leaseMs;
    const value = JSON.stringify({ node: this.node, expires_at: expiresAt } satisfies LeaseValue);
    try {
      const entry = await kv.get(queue);
      let revision: number;
      if (!entry || entry.operation !== 'PUT' || entry.length === 0) {
        revision = entry ? await kv.update(queue, value, entry.revision) : await kv.create(queue, value);
      } else {
        const current = entry.json() as LeaseValue;
        if (current.node !== this.node && current.expires_at > Date.now()) return false;
        revision = await kv.update(queue, value, entry.revision);
      }
      const wasLeading = this.held.get(queue);
      this.held.set(queue, { revision, expiresAt, epoch: wasLeading?.epoch ?? revision });
      if (!wasLeading) {
        this.log.info({ queue }, 'leading queue');
        for (const listener of this.listeners) listener(queue, true);
      }
      return true;
    } catch (err) {
      // A CAS loss (another node renewed or took it first) is the normal outcome of a race.
      this.log.debug({ queue, err }, 'leadership not acquired');
      return false;
    }
  }

  private async renew(queue: string): Promise<void> {
    const lease = this.held.get(queue);
    if (!lease) return;
    const expiresAt = Date.now() + this.leaseMs;
    try {
      const revision = await this.kv!.update(queue, JSON.stringify({ node: this.node, expires_at: expiresAt } satisfies LeaseValue), lease.revision);
      this.held.set(queue, { revision, expiresAt, epoch: lease.epoch });
    } catch (err) {
      this.lose(queue, err);
    }
  }

  private lose(queue: string, err?: unknown): void {
    if (!this.held.delete(queue)) return;
    this.log.warn({ queue, err }, 'lost queue leadership');
    for (const listener of this.listeners) listener(queue, false);
  }

  private ticking = false;
  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      for (const queue of [...this.held.keys()]) {
        // A lease that lapsed locally (e.g. the process stalled) is no longer ours to act on.
        if (!this.isLeader(queue)) this.lose(queue);
        else if (this.idleFor(queue) >= this.leaseMs) await this.release(queue);
        else await this.renew(queue);
      }
      for (const queue of this.known) if (!this.held.has(queue) && !this.isIdle(queue)) await this.acquire(queue);
    } finally {
      this.ticking = false;
    }
  }

  private idleFor(queue: string): number {
    if (!this.isIdle(queue)) {
      this.idleSince.delete(queue);
      return 0;
    }
    const since = this.idleSince.get(queue) ?? Date.now();
    this.idleSince.set(queue, since);
    return Date.now() - since;
  }

  /** Lets an idle queue go: the lease is freed, and the queue is led again on its next request. */
  private release(queue: string): Promise<void> {
    return this.giveUp(queue, true);
  }

  /** Gives up one queue's lease at once (its writer found a later epoch in the log). */
  relinquish(queue: string): Promise<void> {
    return this.giveUp(queue, false);
  }

  private async giveUp(queue: string, idle: boolean): Promise<void> {
    const lease = this.held.get(queue);
    if (!lease) return;
    this.held.delete(queue);
    this.idleSince.delete(queue);
    if (idle) this.known.delete(queue);
    try {
      await this.kv!.update(queue, JSON.stringify({ node: this.node, expires_at: 0 } satisfies LeaseValue), lease.revision);
    } catch {
      /* taken meanwhile: it is someone else's now */
    }
    if (idle) this.log.debug({ queue }, 'queue idle; leadership released');
    else this.log.warn({ queue }, 'gave up queue leadership');
    for (const listener of this.listeners) listener(queue, false);
  }

  /** Gives up every lease so another node can take over at once. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    for (const [queue, lease] of this.held) {
      try {
        await this.kv!.update(queue, JSON.stringify({ node: this.node, expires_at: 0 } satisfies LeaseValue), lease.revision);
      } catch {
        /* someone else holds it already */
      }
      for (const listener of this.listeners) listener(queue, false);
    }
    this.held.clear();
  }
}
