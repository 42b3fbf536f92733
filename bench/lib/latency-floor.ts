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
import { CommitChain, jobEvent } from './events.js';

const QUEUE = 'latency';
const PARTITION = `docket.log.q.${QUEUE}`;

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
    // Each job's two commits as a node stores them ([submitted, claimed], then the run's end),
    // encoded before the clock starts: the floor leaves out everything docket computes.
    const chain = new CommitChain(QUEUE);
    const stored = Array.from({ length: n + warmup }, (_, i) => [chain.next([jobEvent(i, 0, QUEUE), jobEvent(i, 2, QUEUE)]), chain.next([jobEvent(i, 6, QUEUE)])] as const);
    let job = 0;
    let last = 0;
    let commits = 0;
    const append = async (payload: Uint8Array): Promise<void> => {
      const ack = await leader.request(PARTITION, payload, { headers: appendHeaders(`floor-${++commits}`, last), timeout: 10_000 });
      const { seq, error } = ack.json<{ seq?: number; error?: { description: string } }>();
      if (seq === undefined) throw new Error(`append refused: ${error?.description ?? 'no sequence'}`);
      last = seq;
    };

    const submitted = jobEvent(0, 0, QUEUE).data as { job_id: string; params: unknown };
    let done: (() => void) | undefined;
    let failed: ((err: unknown) => void) | undefined;
    const fail = (err: unknown): void => failed?.(err);
    if (!options.embedded) {
      // The hops carry what docket's do, about: the submit, the claim's commit (the job handed
      // over), the run's end, the completion's commit (its live message).
      leader.subscribe('floor.submit', { callback: () => void append(stored[job]![0]).then(() => leader.publish('floor.job', stored[job]![0]), fail) });
      worker.subscribe('floor.job', { callback: () => worker.publish('floor.complete', JSON.stringify({ job_id: submitted.job_id, run_id: 'R', result: null })) });
      leader.subscribe('floor.complete', { callback: () => void append(stored[job]![1]).then(() => leader.publish('floor.done', stored[job]![1]), fail) });
      client.subscribe('floor.done', { callback: (_err: Error | null, _msg: Msg) => done?.() });
      await Promise.all(conns.map((nc) => nc.flush()));
    }
    const once = (): Promise<void> => {
      if (options.embedded) return append(stored[job]![0]).then(() => append(stored[job]![1]));
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`floor: job ${job} not seen in 30 s`)), 30_000);
        done = () => {
          clearTimeout(timer);
          resolve();
        };
        failed = reject;
        client.publish('floor.submit', JSON.stringify({ queue: QUEUE, params: submitted.params }));
      });
    };

    const samples: number[] = [];
    const m = await measured({ bench: process.pid, nats: server.process.pid! }, async () => {
      for (let i = 0; i < n + warmup; i++) {
        const t0 = performance.now();
        await once();
        samples.push(performance.now() - t0);
        job += 1;
      }
    });
    const { values, extra } = latencyFigures(samples, warmup, n);
    return { values, cpu: m.cpu, extra: { ...extra, appends: commits, path: options.embedded ? '2 appends' : '2 appends + 4 one-way hops' } };
  } finally {
    for (const nc of conns) await nc.close().catch(() => undefined);
    await server.stop();
  }
}
