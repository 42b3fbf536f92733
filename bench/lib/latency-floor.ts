/**
 * The latency rows' floor: the path the contract gives one job from submit to completion seen,
 * played on bare NATS with no docket code, on a fresh nats-server beside the docket and BullMQ
 * runs of the same group. Three connections in this process (client, leader, worker):
 *
 *   client → leader (core publish) → append [submitted, claimed], wait for its ack → leader →
 *   worker (core publish) → worker → leader (core publish) → append [succeeded], wait for its
 *   ack → leader → client (core publish)
 *
 * Two appends in sequence are the contract's (a job is handed over only after its claim's commit
 * is acknowledged, a completion is seen only after its commit is); the four one-way hops are a
 * worker and a client in a process of their own. `embedded: true` plays the embedded rows' path:
 * the two appends alone. Nothing is decided, encoded or folded, so docket can only be slower.
 */
import { connect } from '@nats-io/transport-node';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { startNatsServer } from '../../test/support/nats-server.js';
import { latencyFigures, measured, type Measurement } from './harness.js';
import { appendHeaders, freshStream } from './jetstream.js';

/** About a stored commit of a submit and its claim, and of a completion (format 3). */
const CLAIM_COMMIT = new Uint8Array(900).fill(65);
const END_COMMIT = new Uint8Array(450).fill(66);
const PARTITION = 'docket.log.q.latency';

export async function latencyFloor(n: number, warmup: number, options: { embedded: boolean }): Promise<Measurement> {
  const server = await startNatsServer();
  const conns: NatsConnection[] = [];
  try {
    const open = async (name: string): Promise<NatsConnection> => {
      const nc = await connect({ servers: server.url, name });
      conns.push(nc);
      return nc;
    };
    const [client, leader, worker] = [await open('floor-client'), await open('floor-leader'), await open('floor-worker')];
    await freshStream(leader, undefined, ['docket.log.>']);
    let last = 0;
    let commits = 0;
    const append = async (payload: Uint8Array): Promise<void> => {
      const ack = await leader.request(PARTITION, payload, { headers: appendHeaders(`floor-${++commits}`, last), timeout: 10_000 });
      const { seq, error } = ack.json<{ seq?: number; error?: { description: string } }>();
      if (seq === undefined) throw new Error(`append refused: ${error?.description ?? 'no sequence'}`);
      last = seq;
    };

    let done: (() => void) | undefined;
    let failed: ((err: unknown) => void) | undefined;
    const fail = (err: unknown): void => failed?.(err);
    if (!options.embedded) {
      leader.subscribe('floor.submit', { callback: () => void append(CLAIM_COMMIT).then(() => leader.publish('floor.job', '{}'), fail) });
      worker.subscribe('floor.job', { callback: () => worker.publish('floor.complete', '{}') });
      leader.subscribe('floor.complete', { callback: () => void append(END_COMMIT).then(() => leader.publish('floor.done', '{}'), fail) });
      client.subscribe('floor.done', { callback: (_err: Error | null, _msg: Msg) => done?.() });
      await Promise.all(conns.map((nc) => nc.flush()));
    }
    const once = (): Promise<void> => {
      if (options.embedded) return append(CLAIM_COMMIT).then(() => append(END_COMMIT));
      return new Promise<void>((resolve, reject) => {
        done = resolve;
        failed = reject;
        client.publish('floor.submit', '{}');
      });
    };

    const samples: number[] = [];
    const m = await measured({ bench: process.pid, nats: server.process.pid! }, async () => {
      for (let i = 0; i < n + warmup; i++) {
        const t0 = performance.now();
        await once();
        samples.push(performance.now() - t0);
      }
    });
    const { values, extra } = latencyFigures(samples, warmup, n);
    return { values, cpu: m.cpu, extra: { ...extra, appends: commits, path: options.embedded ? '2 appends' : '2 appends + 4 one-way hops' } };
  } finally {
    for (const nc of conns) await nc.close().catch(() => undefined);
    await server.stop();
  }
}
