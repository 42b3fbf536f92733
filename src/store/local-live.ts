/**
 * The commits this node writes, handed to the clients embedded in its process (`Client.connect({
 * local: node })`) as they are acknowledged, beside the same commit published on core NATS: a
 * client in the leader's process sees a job's end with no trip through nats-server.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import type { LiveCommitListener, LocalLive } from '../client/live.js';
import type { Logger } from '../logger.js';

export class LocalLiveCommits implements LocalLive {
  private readonly listeners = new Set<LiveCommitListener>();

  /** `nc`: the connection the node publishes its live commits on (LocalLive.nc). */
  constructor(
    readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

  subscribe(listener: LiveCommitListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** Hands a commit to every listener; the bytes are the stored ones, which no one changes. */
  published(partition: string, seq: number, payload: Uint8Array): void {
    for (const listener of this.listeners) {
      // A listener's throw must not keep the others, or the writer, from going on.
      try {
        listener(partition, seq, payload);
      } catch (err) {
        this.log.error({ err, partition, seq }, 'a local live listener failed');
      }
    }
  }
}
