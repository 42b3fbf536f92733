/**
 * Core publishes gathered over one turn of the event loop and handed to nats.js together, so
 * they leave in one socket write. nats.js writes once per burst of publishes in one microtask
 * run; a commit's live events and the replies to the commands it answers are published a few
 * promise hops apart, so each went out in a write of its own. On the VMs docket is measured on, a
 * socket write costs tens of microseconds of CPU whatever its size (README "Performance"), so at
 * concurrency 1 that was a third of the node's writes per job. A turn that answers a worker
 * writes twice (publishFirst): where a job goes next matters more than one write.
 */
import type { MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logger.js';

interface Outgoing {
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly headers: MsgHdrs | undefined;
}

export class Outbox {
  /** Published before `pending`: the replies that hand workers their jobs (`publishFirst`). */
  private first: Outgoing[] = [];
  private pending: Outgoing[] = [];
  /** The last turn's `pending`, held back one turn behind that turn's `first`: it leaves next, whatever that turn holds. */
  private held: Outgoing[] = [];
  private tasks: (() => void)[] = [];
  private scheduled = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

  /** Publishes at the end of this turn, in order with everything else published through this outbox. */
  publish(subject: string, payload: Uint8Array, headers?: MsgHdrs): void {
    this.pending.push({ subject, payload, headers });
    this.arm();
  }

  /**
   * Publishes at the end of this turn, in a socket write ahead of this turn's other publishes
   * (they follow a turn later): a reply a worker waits on (its claimed jobs, its completion's next
   * claim). The job's path goes through the worker: at concurrency 1 this took 0.2-0.4 ms off the
   * p50 of `bench/latency-probe.ts --node-process` (README "Performance"), for one more write per
   * commit that answers workers. nats-server keeps one connection's messages in order, so a
   * connection that gets both (a worker sharing it with the job's watcher) reads its job first.
   */
  publishFirst(subject: string, payload: Uint8Array, headers?: MsgHdrs): void {
    this.first.push({ subject, payload, headers });
    this.arm();
  }

  /**
   * Runs `task` at the end of this turn, after this turn's publishes: a partition writer sends
   * its next commit here, so a commit decided in the turn that published the previous commit's
   * live events and replies (an embedded worker's completion, README "Embedded workers") leaves
   * in the same socket write as they do.
   */
  atEndOfTurn(task: () => void): void {
    this.tasks.push(task);
    this.arm();
  }

  private arm(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    const tasks = this.tasks;
    this.tasks = [];
    this.scheduled = false;
    // Workers' replies leave in a socket write ahead of the rest, which follows one turn later:
    // the process that hosts a worker reads its job before the client's reply and the commit's
    // live events, which it would otherwise handle first about as often as not. Held back one
    // turn only: on a node that answers workers every turn, the rest still leaves each turn.
    const batch = this.held.length === 0 ? this.first : [...this.held, ...this.first];
    if (this.first.length === 0) {
      batch.push(...this.pending);
      this.held = [];
    } else {
      this.held = this.pending;
      if (this.held.length > 0) this.arm();
    }
    this.first = [];
    this.pending = [];
    for (const { subject, payload, headers } of batch) {
      try {
        this.nc.publish(subject, payload, headers === undefined ? undefined : { headers });
      } catch (err) {
        // The connection is closed or draining: the requester's timeout or the log tells the rest.
        this.log.warn({ err, subject, bytes: payload.length }, 'publish failed');
      }
    }
    for (const task of tasks) {
      // One task's throw must not keep the others (another partition's commit) from running.
      try {
        task();
      } catch (err) {
        this.log.error({ err }, 'end-of-turn task failed');
      }
    }
  }
}
