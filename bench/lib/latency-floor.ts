/**
 * The latency rows' floor: the path the contract gives one job from submit to completion seen,
 * played on bare NATS with no docket code, on a fresh nats-server beside the docket and BullMQ
 * runs of the same group. Three connections (client, leader, worker):
 *
 *   client → leader (core publish) → append [submitted, claimed], wait for its ack → leader →
 *   worker (core publish) → worker → leader (core publish) → append [succeeded], wait for its
 *   ack → leader → client (core publish)
 *
 * Two appends in sequence are the contract's (a job is handed over only after its claim's commit
 * is acknowledged, a completion is seen only after its commit is); the four one-way hops are a
 * worker and a client in a process of their own. Where the leader runs:
 * - `hops`: in this process, beside the worker and the client;
 * - `leader_process`: in a process of its own (bench/floor-leader.ts), as a docket node is when
 *   the worker and the client are not embedded in it: every hop then wakes another process;
 * - `embedded`: the embedded rows' path, the two appends alone.
 * Nothing is decided, encoded or folded, so docket can only be slower.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { startNatsServer } from '../../test/support/nats-server.js';
import { REPO } from './docket.js';
import { latencyFigures, measured, type Measurement } from './harness.js';
import { appendHeaders, freshStream } from './jetstream.js';
import { CommitChain, jobEvent } from './events.js';
import { track } from './procs.js';

const QUEUE = 'latency';
const PARTITION = `docket.log.q.${QUEUE}`;
/** The hops' core subjects, between the client, the leader and the worker. */
const HOP = { submit: 'floor.submit', job: 'floor.job', complete: 'floor.complete', done: 'floor.done' } as const;
/** What the hops carry for the submit and the run's end (every job the same: nothing is decided). */
const SUBMITTED = jobEvent(0, 0, QUEUE).data as { job_id: string; params: unknown };

export type FloorPath = 'hops' | 'leader_process' | 'embedded';

/** Each job's two commits as a node stores them ([submitted, claimed], then the run's end). */
export function floorCommits(jobs: number): (readonly [Uint8Array, Uint8Array])[] {
  const chain = new CommitChain(QUEUE);
  return Array.from({ length: jobs }, (_, i) => [chain.next([jobEvent(i, 0, QUEUE), jobEvent(i, 2, QUEUE)]), chain.next([jobEvent(i, 6, QUEUE)])] as const);
}

/** Appends to the floor's partition in sequence, each guarded by the last one's sequence, as a writer does. */
export function floorAppender(nc: NatsConnection): (payload: Uint8Array) => Promise<void> {
  let last = 0;
  let commits = 0;
  return async (payload) => {
    const ack = await nc.request(PARTITION, payload, { headers: appendHeaders(`floor-${++commits}`, last), timeout: 10_000 });
    const { seq, error } = ack.json<{ seq?: number; error?: { description: string } }>();
    if (seq === undefined) throw new Error(`append refused: ${error?.description ?? 'no sequence'}`);
    last = seq;
  };
}

/**
 * The leader's part of the path with hops: a submit appends the job's first commit and hands the
 * job over, a completion appends the second and announces it. Jobs come one at a time, in order.
 */
export async function serveFloorLeader(leader: NatsConnection, commits: readonly (readonly [Uint8Array, Uint8Array])[], onError: (err: unknown) => void): Promise<void> {
  const append = floorAppender(leader);
  let job = 0;
  leader.subscribe(HOP.submit, { callback: () => void append(commits[job]![0]).then(() => leader.publish(HOP.job, commits[job]![0]), onError) });
  leader.subscribe(HOP.complete, {
    callback: () =>
      void append(commits[job]![1]).then(() => {
        leader.publish(HOP.done, commits[job]![1]);
        job += 1;
      }, onError),
  });
  await leader.flush();
}

export async function latencyFloor(n: number, warmup: number, options: { path: FloorPath }): Promise<Measurement> {
  const server = await startNatsServer();
  const conns: NatsConnection[] = [];
  let leaderProcess: ChildProcess | undefined;
  let leaderDied: (code: number | null, signal: NodeJS.Signals | null) => void = () => undefined;
  try {
    const open = async (name: string): Promise<NatsConnection> => {
      const nc = await connect({ servers: server.url, name });
      conns.push(nc);
      return nc;
    };
    const [client, leader, worker] = [await open('floor-client'), await open('floor-leader'), await open('floor-worker')];
    await freshStream(leader, undefined, ['docket.log.>']);
    // Encoded before the clock starts: the floor leaves out everything docket computes.
    const commits = floorCommits(n + warmup);
    let done: (() => void) | undefined;
    let failed: ((err: unknown) => void) | undefined;
    const fail = (err: unknown): void => failed?.(err);
    leaderDied = (code, signal) => fail(new Error(`the floor's leader process exited (${code ?? signal}) mid-run`));
    if (options.path === 'hops') await serveFloorLeader(leader, commits, fail);
    if (options.path === 'leader_process') {
      // `node --import tsx`: one process, so its pid is the leader's (CPU).
      leaderProcess = spawn(process.execPath, ['--import', 'tsx', 'bench/floor-leader.ts', server.url, String(n + warmup)], { cwd: REPO, stdio: ['ignore', 'pipe', 'inherit'] });
      track(leaderProcess);
      await leaderReady(leaderProcess);
      // A leader that dies mid-run fails the job in flight at once, not after its 30 s.
      leaderProcess.once('exit', leaderDied);
    }
    if (options.path !== 'embedded') {
      // The hops carry what docket's do, about: the submit, the claim's commit (the job handed
      // over), the run's end, the completion's commit (its live message).
      const ended = JSON.stringify({ job_id: SUBMITTED.job_id, run_id: 'R', result: null });
      worker.subscribe(HOP.job, { callback: () => worker.publish(HOP.complete, ended) });
      client.subscribe(HOP.done, { callback: () => done?.() });
      await Promise.all(conns.map((nc) => nc.flush()));
    }
    // Embedded: this process is the leader and appends itself.
    const append = options.path === 'embedded' ? floorAppender(leader) : undefined;
    let job = 0;
    const submit = JSON.stringify({ queue: QUEUE, params: SUBMITTED.params });
    const one = (): Promise<void> => {
      if (append) return append(commits[job]![0]).then(() => append(commits[job]![1]));
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`floor: job ${job} not seen in 30 s`)), 30_000);
        done = () => {
          clearTimeout(timer);
          resolve();
        };
        failed = reject;
        client.publish(HOP.submit, submit);
      });
    };

    const samples: number[] = [];
    // The leader process plays the node: its CPU goes in the report's node column.
    const roles = { bench: process.pid, nats: server.process.pid!, ...(leaderProcess ? { node: leaderProcess.pid! } : {}) };
    const m = await measured(roles, async () => {
      for (let i = 0; i < n + warmup; i++) {
        const t0 = performance.now();
        await one();
        samples.push(performance.now() - t0);
        job += 1;
      }
    });
    const { values, extra } = latencyFigures(samples, warmup, n);
    const path = { hops: '2 appends + 4 one-way hops', leader_process: '2 appends + 4 one-way hops, the leader in its own process', embedded: '2 appends' }[options.path];
    return { values, cpu: m.cpu, extra: { ...extra, appends: 2 * (n + warmup), path } };
  } finally {
    if (leaderProcess) await stopLeader(leaderProcess, leaderDied);
    for (const nc of conns) await nc.close().catch(() => undefined);
    await server.stop();
  }
}

/** Resolves once the leader process prints `ready`; rejects if it exits first or takes 60 s. */
function leaderReady(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => finish(new Error('the floor\'s leader process not ready after 60 s')), 60_000);
    const onData = (chunk: Buffer): void => {
      out += chunk.toString();
      if (/^ready$/m.test(out)) finish(null);
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => finish(new Error(`the floor's leader process exited (${code ?? signal}) before it was ready: ${out}`));
    function finish(err: Error | null): void {
      clearTimeout(timer);
      child.stdout!.off('data', onData);
      child.off('exit', onExit);
      if (err) reject(err);
      else resolve();
    }
    child.stdout!.on('data', onData);
    child.once('exit', onExit);
  });
}

/** Stops the leader process and waits for it to be gone, so it takes no CPU from the next run. */
async function stopLeader(child: ChildProcess, onDied: (code: number | null, signal: NodeJS.Signals | null) => void): Promise<void> {
  child.off('exit', onDied);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
