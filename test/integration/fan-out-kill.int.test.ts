/**
 * A fan-out job across a real crash of the docket node: `docket up` as a child process with a
 * data directory, three Workers of nodes n1, n2, n3. At the kill: n1's entry completed, n2's
 * running (its handler held), n3's retrying (its first attempt failed; backoff 3 s). The node is
 * SIGKILLed and started again on the same stream and data directory. After the restart n2's
 * worker heartbeats and completes through the new node, n3's entry is queued again at its
 * retry_at and completes, and the job succeeds. In the log: n1 and n2 claimed once each (no
 * double claim across the restart), n3 twice (its retry), the job ended once; the audit is clean.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { auditMessages } from '../../src/audit/index.js';
import { Client, type JobDetail } from '../../src/client/client.js';
import { Worker as DocketWorker, type WorkerHandler } from '../../src/client/worker.js';
import { decodeCommit } from '../../src/nats/codec.js';
import { jobNodeId } from '../../src/ids.js';
import { readLog } from '../../src/store/read-log.js';
import { uniqueQueue } from '../support/docket.js';
import { startDocketProcess, type DocketProcess } from '../support/docket-process.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { deferred } from '../support/worker-helpers.js';

let server: TestNatsServer | undefined;
let dataDir: string;
let node: DocketProcess | undefined;
let client: Client | undefined;
const workers: DocketWorker[] = [];

beforeEach(async () => {
  server = await startNatsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'docket-fan-out-kill-'));
});

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
  await client?.close();
  client = undefined;
  await node?.kill('SIGKILL');
  node = undefined;
  await server?.stop();
  server = undefined;
  rmSync(dataDir, { recursive: true, force: true });
});

/** Asks for the job until `check` holds (the node is another process: no store to await). */
async function untilDetail(jobId: string, check: (detail: JobDetail) => boolean, what: string, timeoutMs = 60_000): Promise<JobDetail> {
  const deadline = Date.now() + timeoutMs;
  let last: JobDetail | undefined;
  for (;;) {
    last = await client!.get(jobId).catch(() => last);
    if (last !== undefined && check(last)) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last?.fan_out ?? last?.job)}\n${node?.log().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const statusesOf = (detail: JobDetail) => Object.fromEntries((detail.fan_out?.nodes ?? []).map((n) => [n.node, n.status]));

test.each([
  { name: 'the whole log folded at restart', checkpoint: false },
  { name: 'from a checkpoint holding the job nodes', checkpoint: true },
])('SIGKILL mid fan-out ($name): every node run ends once, none is claimed twice, the job succeeds', { timeout: 180_000 }, async ({ checkpoint }) => {
  const url = server!.url;
  node = await startDocketProcess({ server: url, dataDir });
  client = await Client.connect({ servers: url, requestTimeoutMs: 15_000 });
  const queue = uniqueQueue('fan-kill');
  const n2Gate = deferred<void>();
  const n2Started = deferred<void>();
  let n3Runs = 0;
  const handlers: Record<string, WorkerHandler> = {
    n1: () => ({ node: 'n1' }),
    n2: async () => {
      n2Started.resolve();
      await n2Gate.promise;
      return { node: 'n2' };
    },
    n3: () => {
      if (++n3Runs === 1) throw new Error('first attempt fails');
      return { node: 'n3' };
    },
  };
  for (const name of ['n1', 'n2', 'n3']) {
    // A long lease: n2's run outlives the crash (its worker heartbeats the new node every 10 s).
    const w = new DocketWorker({ servers: url, queue, node: name, leaseMs: 30_000, claimWaitMs: 500, handler: handlers[name]! });
    workers.push(w);
    await w.start();
  }
  // A long quorum timeout: the crash and n3's backoff must not skip the nodes still running.
  const { job_id: jobId } = await client.submit({ queue, fan_out: { nodes: ['n1', 'n2', 'n3'], quorum: 3, quorum_timeout_ms: 120_000 }, max_attempts: 2, backoff: { base_ms: 3_000, max_ms: 3_000, jitter: 0 } });
  await n2Started.promise;
  await untilDetail(jobId, (d) => JSON.stringify(statusesOf(d)) === JSON.stringify({ n1: 'completed', n2: 'running', n3: 'retrying' }), 'n1 completed, n2 running, n3 retrying');

  if (checkpoint) {
    // A clean stop writes a checkpoint holding the job nodes; the next node starts from it and is the one killed.
    await node.kill('SIGTERM');
    expect(node.log()).toContain('checkpoint written');
    node = await startDocketProcess({ server: url, dataDir });
    expect(node.log()).toContain('checkpoint restored');
  }
  await node.kill('SIGKILL');
  expect(node.child.signalCode).toBe('SIGKILL');
  node = await startDocketProcess({ server: url, dataDir });

  // Where it was: the job running, n2 still running (not handed out again), n3 waiting for its retry_at.
  const after = await untilDetail(jobId, () => true, 'the job after the restart');
  expect(after.job.status).toBe('running');
  expect(statusesOf(after)).toMatchObject({ n1: 'completed', n2: 'running' });

  n2Gate.resolve();
  const done = await untilDetail(jobId, (d) => d.job.status !== 'running', 'the job ended');
  expect(done.job.status).toBe('succeeded');
  expect(statusesOf(done)).toEqual({ n1: 'completed', n2: 'completed', n3: 'completed' });
  expect(n3Runs).toBe(2);

  const messages = [];
  const byNode = new Map<string, string[]>();
  const jobTypes: string[] = [];
  for await (const m of readLog(client.nc, {})) {
    messages.push(m);
    for (const e of decodeCommit(m.data).events) {
      if (e.aggregate.kind === 'jobnode') byNode.set(e.aggregate.id, [...(byNode.get(e.aggregate.id) ?? []), e.type]);
      if (e.aggregate.kind === 'job' && e.aggregate.id === jobId) jobTypes.push(e.type);
    }
  }
  const claims = (name: string) => (byNode.get(jobNodeId(jobId, name)) ?? []).filter((t) => t === 'jobnode.claimed').length;
  expect([claims('n1'), claims('n2'), claims('n3')]).toEqual([1, 1, 2]);
  expect(byNode.get(jobNodeId(jobId, 'n3'))).toEqual(['jobnode.created', 'jobnode.claimed', 'jobnode.retrying', 'jobnode.requeued', 'jobnode.claimed', 'jobnode.completed']);
  expect(jobTypes).toEqual(['job.submitted', 'job.claimed', 'job.succeeded']);
  const audit = auditMessages(messages);
  expect(audit.violations).toEqual([]);
});
