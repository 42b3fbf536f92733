/**
 * Fan-out jobs (seed 004, kind `jobnode`) end to end on a real nats-server: two Workers with
 * different `node` names, a fan-out job runs once on each and succeeds at its quorum; a node
 * failing then retrying; a quorum that can no longer be reached fails the job; the quorum
 * timeout skips a node that never claims; cancel ends the live nodes; a fan-out without `nodes`
 * records the nodes the leader saw; the log folds again to the same job nodes (replay) and passes
 * the audit. The crash of the docket node mid fan-out is test/integration/fan-out-kill.int.test.ts.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import type { JetStreamManager } from '@nats-io/jetstream';
import { FAN_OUT_WORKER, type FoldState, type JobNodeContext } from '../../machines/index.js';
import { auditMessages } from '../../src/audit/audit.js';
import { Client } from '../../src/client/client.js';
import { Worker as DocketWorker, type WorkerHandler, type WorkerJobContext } from '../../src/client/worker.js';
import { DocketError, NonRetryableJobError } from '../../src/errors.js';
import { jobNodeId } from '../../src/ids.js';
import type { DocketNode } from '../../src/node.js';
import { Kernel } from '../../src/store/kernel.js';
import { decodeCommit } from '../../src/nats/codec.js';
import { positionOf } from '../../machines/index.js';
import { readLog } from '../../src/store/read-log.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { closeTestFile, commitAsDeposed, connectTestClients, queueLog, startTrackedNode, uniqueQueue } from '../support/docket.js';
import { deferred, eventually, leadNow, untilJob, work } from '../support/worker-helpers.js';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { REPO_ROOT, runDocket } from '../support/cli.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
const workers = new Set<DocketWorker>();

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'fan-out-1' });
  ({ client, nc, jsm } = await connectTestClients(server, 'fan-out-test'));
});

afterAll(async () => {
  for (const w of workers) await w.close();
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(async () => {
  for (const w of workers) await w.close();
  workers.clear();
});

type Seen = { readonly node: string; readonly jobId: string; readonly fanOutJob: string | undefined; readonly nodes: readonly string[] | undefined; readonly attempt: number };

/** A started Worker of `nodeName` on the file's server; every run it is handed is noted in `seen`. */
async function startWorker(queue: string, nodeName: string, seen: Seen[], handler: WorkerHandler = () => ({ ran: nodeName }), leaseMs = 30_000): Promise<DocketWorker> {
  const w = new DocketWorker({
    servers: server.url,
    queue,
    node: nodeName,
    leaseMs,
    claimWaitMs: 500,
    handler: (job, ctx: WorkerJobContext) => {
      seen.push({ node: ctx.node, jobId: job.job_id, fanOutJob: ctx.fanOut?.job_id, nodes: ctx.fanOut?.nodes, attempt: job.attempt });
      return handler(job, ctx);
    },
  });
  workers.add(w);
  await w.start();
  return w;
}

function nodeState(jobId: string, nodeName: string): FoldState<JobNodeContext> | undefined {
  return node.aggregates.get<JobNodeContext>('jobnode', jobNodeId(jobId, nodeName))?.state;
}

const ended = (status: string) => (record: { state: { job: { value: string } } }) => record.state.job.value === status;

describe('fan-out jobs', () => {
  test('a fan-out job runs once on each node and succeeds at its quorum; get shows every node', async () => {
    const queue = uniqueQueue('fan-basic');
    const seen: Seen[] = [];
    await startWorker(queue, 'n1', seen);
    await startWorker(queue, 'n2', seen);
    const { job_id, status } = await client.submit({ queue, params: { v: 1 }, fan_out: { nodes: ['n1', 'n2'] } });
    expect(status).toBe('running');
    await untilJob(node, job_id, ended('succeeded'), 'the fan-out job succeeded');

    expect(seen.map((s) => s.node).sort()).toEqual(['n1', 'n2']);
    for (const s of seen) {
      expect(s.fanOutJob).toBe(job_id);
      expect(s.nodes).toEqual(['n1', 'n2']);
      expect(s.jobId).toBe(jobNodeId(job_id, s.node));
    }
    const detail = await client.get(job_id);
    expect(detail.job.status).toBe('succeeded');
    expect(detail.fan_out?.quorum).toBe(2);
    expect(detail.fan_out?.nodes.map((n) => [n.node, n.status])).toEqual([
      ['n1', 'completed'],
      ['n2', 'completed'],
    ]);
    expect(detail.fan_out?.nodes[0]?.result).toEqual({ ran: 'n1' });
    // The job's own run is the leader's, not a worker's.
    expect(node.store.get(job_id)?.state.run.context.worker).toBe(FAN_OUT_WORKER);
    expect(node.store.get(job_id)?.state.run.context.result).toEqual({ quorum: 2, completed: 2, nodes: { n1: 'completed', n2: 'completed' } });
  });

  test('a node that fails is retried with the job backoff and completes on its second attempt', async () => {
    const queue = uniqueQueue('fan-retry');
    const seen: Seen[] = [];
    let failures = 0;
    await startWorker(queue, 'n1', seen);
    await startWorker(queue, 'n2', seen, () => {
      if (failures++ === 0) throw new Error('disk busy');
      return { ran: 'n2' };
    });
    const { job_id } = await client.submit({ queue, fan_out: { nodes: ['n1', 'n2'] }, max_attempts: 3, backoff: { base_ms: 50, max_ms: 50, jitter: 0 } });
    await untilJob(node, job_id, ended('succeeded'), 'the fan-out job succeeded');
    expect(nodeState(job_id, 'n2')?.value).toBe('completed');
    expect(nodeState(job_id, 'n2')?.context.attempt).toBe(2);
    expect(seen.filter((s) => s.node === 'n2').map((s) => s.attempt)).toEqual([1, 2]);
    const types = (await queueLog(nc, queue)).filter((e) => e.jobId === jobNodeId(job_id, 'n2')).map((e) => e.type);
    expect(types).toEqual(['jobnode.created', 'jobnode.claimed', 'jobnode.retrying', 'jobnode.requeued', 'jobnode.claimed', 'jobnode.completed']);
  });

  test('the job fails once its quorum can no longer be reached; a node still live is skipped', async () => {
    const queue = uniqueQueue('fan-lost');
    const seen: Seen[] = [];
    await startWorker(queue, 'n1', seen, () => {
      throw new NonRetryableJobError('no space left');
    });
    // n2 has no worker: its entry stays queued until the job ends.
    const { job_id } = await client.submit({ queue, fan_out: { nodes: ['n1', 'n2'], quorum: 2 }, max_attempts: 5 });
    const record = await untilJob(node, job_id, ended('failed'), 'the fan-out job failed');
    expect(record.state.run.context.error?.message).toMatch(/quorum not reached \(quorum_lost\): 0 of 2 nodes completed, 2 needed/);
    expect(record.state.run.context.error?.retryable).toBe(false);
    expect(nodeState(job_id, 'n1')?.value).toBe('failed');
    expect(nodeState(job_id, 'n1')?.context.attempt).toBe(1);
    expect(nodeState(job_id, 'n2')?.value).toBe('skipped');
    expect(nodeState(job_id, 'n2')?.context.reason).toBe('quorum_lost');
    // No automatic retry of the job as a whole; a retry by hand is refused (resubmit instead).
    await expect(client.request('retry', { job_id })).rejects.toThrow(/fan-out job/);
  });

  test('a node that never claims is skipped at the quorum timeout after the first completion; the job succeeds at 2 of 3', async () => {
    const queue = uniqueQueue('fan-timeout');
    const seen: Seen[] = [];
    await startWorker(queue, 'n1', seen);
    await startWorker(queue, 'n2', seen);
    const { job_id } = await client.submit({ queue, fan_out: { nodes: ['n1', 'n2', 'n3'], quorum_timeout_ms: 300 } });
    const record = await untilJob(node, job_id, ended('succeeded'), 'the fan-out job succeeded');
    expect(nodeState(job_id, 'n3')?.value).toBe('skipped');
    expect(nodeState(job_id, 'n3')?.context.reason).toBe('quorum_timeout');
    expect(record.state.run.context.result).toEqual({ quorum: 2, completed: 2, nodes: { n1: 'completed', n2: 'completed', n3: 'skipped' } });
  });

  test('cancelling a fan-out job cancels its live nodes, the running one aborted', async () => {
    const queue = uniqueQueue('fan-cancel');
    const seen: Seen[] = [];
    const started = deferred<void>();
    const aborted = deferred<void>();
    await startWorker(queue, 'n1', seen, async (_job, ctx) => {
      started.resolve();
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
      aborted.resolve();
      throw new Error('aborted');
    }, 1_500); // heartbeats every 500 ms: the cancel reaches the handler by the next one
    const { job_id } = await client.submit({ queue, fan_out: { nodes: ['n1', 'n2'] } });
    await started.promise;
    expect((await client.cancel(job_id, { reason: 'not needed' })).status).toBe('cancelled');
    await aborted.promise;
    await eventually(() => nodeState(job_id, 'n1')?.value === 'cancelled' && nodeState(job_id, 'n2')?.value === 'cancelled', 'both nodes cancelled');
    expect(nodeState(job_id, 'n1')?.context.reason).toBe('job cancelled');
  });

  test('without nodes the job fans out to the nodes seen on the queue, recorded on its submit; none seen is refused', async () => {
    const empty = uniqueQueue('fan-none');
    const refused = await client.submit({ queue: empty, fan_out: {} }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(DocketError);
    expect((refused as DocketError).code).toBe('invalid_request');
    expect((refused as DocketError).details).toMatchObject({ queue: empty, reason: 'no_nodes' });
    expect(await queueLog(nc, empty)).toEqual([]);

    const queue = uniqueQueue('fan-auto');
    const seen: Seen[] = [];
    await startWorker(queue, 'n2', seen);
    await startWorker(queue, 'n1', seen);
    await untilJob(node, (await client.submit({ queue })).job_id, ended('succeeded'), 'an ordinary job ran');
    await eventually(() => node.jobNodes.liveNodes(queue, Date.now()).length === 2, 'both workers claimed at the leader');
    const { job_id } = await client.submit({ queue, fan_out: {} });
    await untilJob(node, job_id, ended('succeeded'), 'the fan-out job succeeded');
    const submitted = (await queueLog(nc, queue)).find((e) => e.type === 'job.submitted' && e.jobId === job_id);
    expect(submitted?.data['fan_out']).toEqual({ nodes: ['n1', 'n2'], quorum: 2, quorum_timeout_ms: 10_000 });
    // The ordinary job ran once, on either node, and never as a node entry.
    expect(seen.filter((s) => s.fanOutJob === undefined)).toHaveLength(1);
  });

  test('a pause holds the node entries (not the job\'s own run); they run once the queue resumes', async () => {
    const queue = uniqueQueue('fan-paused');
    await client.pause(queue, { reason: 'maintenance', create: true });
    const { job_id, status } = await client.submit({ queue, fan_out: { nodes: ['p1'] } });
    expect(status).toBe('running');
    const claimAs = async () => {
      const reply = await work<{ jobs: { job_id: string; run_id: string }[] }>(nc, queue, 'claim', { worker: 'raw', node: 'p1', max: 5, wait_ms: 0 });
      if (!reply.ok) throw new Error(JSON.stringify(reply.error));
      return reply.jobs;
    };
    expect(await claimAs()).toEqual([]);
    expect(nodeState(job_id, 'p1')?.value).toBe('queued');
    await client.resume(queue);
    const [entry] = await claimAs();
    expect(entry?.job_id).toBe(jobNodeId(job_id, 'p1'));
    const done = await work<{ status: string }>(nc, queue, 'complete', { job_id: entry!.job_id, run_id: entry!.run_id, result: { ok: true } });
    expect(done).toMatchObject({ ok: true, status: 'completed' });
    await untilJob(node, job_id, ended('succeeded'), 'the fan-out job succeeded');
    // A completion resent (same run id) is answered as the first; another run id is stale.
    expect(await work(nc, queue, 'complete', { job_id: entry!.job_id, run_id: entry!.run_id, result: { ok: true } })).toMatchObject({ ok: true, status: 'completed' });
    expect(await work(nc, queue, 'complete', { job_id: entry!.job_id, run_id: 'r-other', result: null })).toMatchObject({ ok: false, error: { code: 'stale_run' } });
  });

  test('fan_out refuses key, depends_on and delays, and a quorum above its nodes', async () => {
    const queue = uniqueQueue('fan-bad');
    await expect(client.submit({ queue, key: 'k', fan_out: { nodes: ['a'] } })).rejects.toThrow(/fan-out job takes no key/);
    await expect(client.submit({ queue, delay_ms: 10, fan_out: { nodes: ['a'] } })).rejects.toThrow(/delay_ms/);
    await expect(client.submit({ queue, fan_out: { nodes: ['a', 'b'], quorum: 3 } })).rejects.toThrow(/quorum 3 exceeds/);
    await expect(client.submit({ queue, fan_out: { nodes: ['a', 'a'] } })).rejects.toThrow(/twice/);
  });
});

describe('leader failover', () => {
  test('when the leader closes mid fan-out the other node takes the queue over: the running node completes there, once, and the job succeeds', { timeout: 60_000 }, async () => {
    const own = await startNatsServer();
    const nodes = [await startTrackedNode(own, { nodeName: 'fan-pair-1', leadershipLeaseMs: 1_000 }), await startTrackedNode(own, { nodeName: 'fan-pair-2', leadershipLeaseMs: 1_000 })];
    const { client: ownClient, nc: ownNc } = await connectTestClients(own, 'fan-pair-test');
    const pairWorkers: DocketWorker[] = [];
    try {
      const queue = uniqueQueue('fan-failover');
      const leader = await leadNow(ownNc, queue, nodes);
      const other = nodes.find((n) => n !== leader)!;
      const gate = deferred<void>();
      const started = deferred<void>();
      for (const [name, handler] of [
        ['n1', () => ({ node: 'n1' })],
        ['n2', async () => {
          started.resolve();
          await gate.promise;
          return { node: 'n2' };
        }],
      ] as const) {
        const w = new DocketWorker({ servers: own.url, queue, node: name, leaseMs: 3_000, claimWaitMs: 300, handler });
        pairWorkers.push(w);
        await w.start();
      }
      const { job_id } = await ownClient.submit({ queue, fan_out: { nodes: ['n1', 'n2'], quorum_timeout_ms: 60_000 } });
      await started.promise;
      // Job node changes are not job store changes: polled.
      await eventually(() => other.aggregates.get<JobNodeContext>('jobnode', jobNodeId(job_id, 'n1'))?.state.value === 'completed', 'n1 completed (as the follower folds it)');

      await leader.close();
      gate.resolve();
      await untilJob(other, job_id, ended('succeeded'), 'the job succeeded on the new leader');
      expect(other.leadership.isLeader(queue)).toBe(true);
      const claims = (await queueLog(ownNc, queue)).filter((e) => e.type === 'jobnode.claimed').map((e) => e.jobId);
      expect(claims.sort()).toEqual([jobNodeId(job_id, 'n1'), jobNodeId(job_id, 'n2')].sort());

      // The new leader learns the live nodes from the workers' next claims: a fan-out without nodes
      // finds both. A claim forwarded to the closed leader holds its worker's slot until it times
      // out (its wait plus 5 s of slack), hence the long wait.
      await eventually(() => other.jobNodes.liveNodes(queue, Date.now()).length === 2, 'both workers claimed at the new leader', 30_000);
      const again = await ownClient.submit({ queue, fan_out: {} });
      await untilJob(other, again.job_id, ended('succeeded'), 'a fan-out job over the nodes the new leader saw');
    } finally {
      for (const w of pairWorkers) await w.close();
      await ownClient.close();
      await ownNc.drain();
      // The leader is closed already when the test got that far: a second close is a no-op or refused.
      for (const n of nodes) await n.close().catch(() => undefined);
      await own.stop();
    }
  });
});

describe('the CLI', () => {
  test('submit --nodes, show, replay --job and explain show the nodes and their events', { timeout: 60_000 }, async () => {
    const queue = uniqueQueue('fan-cli');
    const seen: Seen[] = [];
    await startWorker(queue, 'n1', seen);
    await startWorker(queue, 'n2', seen);
    const submitted = await runDocket(server.url, ['submit', queue, '--nodes', 'n1,n2', '--quorum', '2', '--quorum-timeout-ms', '20000', '--params', '{"v":2}', '--json']);
    expect(submitted.code, submitted.stderr).toBe(0);
    const jobId = (JSON.parse(submitted.stdout) as { job_id: string }).job_id;
    await untilJob(node, jobId, ended('succeeded'), 'the fan-out job succeeded');
    expect((await queueLog(nc, queue)).find((e) => e.type === 'job.submitted')?.data['fan_out']).toEqual({ nodes: ['n1', 'n2'], quorum: 2, quorum_timeout_ms: 20_000 });

    const shown = await runDocket(server.url, ['show', jobId]);
    expect(shown.stdout).toContain('fan-out: quorum 2 of 2 nodes');
    expect(shown.stdout).toMatch(/n1\W+completed\W+1\/1/);

    const replayed = await runDocket(server.url, ['replay', '--job', jobId, '--json']);
    expect(replayed.code, replayed.stderr).toBe(0);
    const { job } = JSON.parse(replayed.stdout) as { job: { status: string; fan_out: { quorum: number; nodes: { node: string; status: string; claims: number }[] }; events: { type: string; jobnode?: { node: string } }[] } };
    expect(job.status).toBe('succeeded');
    expect(job.fan_out.nodes.map((n) => [n.node, n.status, n.claims])).toEqual([
      ['n1', 'completed', 1],
      ['n2', 'completed', 1],
    ]);
    expect(job.events.filter((e) => e.type === 'jobnode.completed').map((e) => e.jobnode?.node).sort()).toEqual(['n1', 'n2']);
    expect(job.events.at(-1)?.type).toBe('job.succeeded');

    const explained = await runDocket(server.url, ['explain', jobId, '--json']);
    expect(explained.code, explained.stderr).toBe(0);
    expect((JSON.parse(explained.stdout) as { fan_out: { quorum: number } }).fan_out.quorum).toBe(2);
  });
});

describe('docket work --node', () => {
  test('runs its node\'s entry with DOCKET_NODE, DOCKET_FAN_OUT_JOB_ID and DOCKET_FAN_OUT_NODES set', { timeout: 60_000 }, async () => {
    const queue = uniqueQueue('fan-work-cli');
    const script = 'process.stdout.write(JSON.stringify({ node: process.env.DOCKET_NODE, job: process.env.DOCKET_FAN_OUT_JOB_ID, nodes: process.env.DOCKET_FAN_OUT_NODES, id: process.env.DOCKET_JOB_ID }))';
    const child = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'docket.js'), 'work', queue, '--node', 'cli-node', '--server', server.url, '--log-level', 'warn', '--', process.execPath, '-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const { job_id } = await client.submit({ queue, fan_out: { nodes: ['cli-node'] } });
      await untilJob(node, job_id, ended('succeeded'), 'the fan-out job succeeded through docket work');
      expect(nodeState(job_id, 'cli-node')?.context.result).toEqual({ node: 'cli-node', job: job_id, nodes: 'cli-node', id: jobNodeId(job_id, 'cli-node') });
    } finally {
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  });
});

describe('the whole log', () => {
  test('folds again to the same job nodes (replay) and passes docket audit', async () => {
    const kernel = new Kernel();
    const messages = [];
    for await (const m of readLog(nc)) {
      messages.push(m);
      decodeCommit(m.data).events.forEach((event, i) => kernel.applyEvent(positionOf(m.seq, i), event));
    }
    expect(kernel.refused).toBe(0);
    const live = [...node.aggregates.values()].filter((r) => r.kind === 'jobnode');
    expect(live.length).toBeGreaterThan(10);
    for (const record of live) expect(kernel.aggregates.get('jobnode', record.id)?.state).toEqual(record.state);
    const audit = auditMessages(messages);
    expect(audit.violations).toEqual([]);
    expect(audit.otherEvents).toBeGreaterThan(30);
  });
});

describe('a tampered log (after the whole log is audited clean)', () => {
  test('a second claim of a job node while a run holds it is an illegal transition the audit names', async () => {
    const queue = uniqueQueue('fan-tamper');
    const { job_id } = await client.submit({ queue, fan_out: { nodes: ['lone'] } });
    const reply = await work<{ jobs: { job_id: string; run_id: string; fan_out?: { node: string } }[] }>(nc, queue, 'claim', { worker: 'raw', node: 'lone', max: 5, wait_ms: 2_000 });
    if (!reply.ok) throw new Error(JSON.stringify(reply.error));
    expect(reply.jobs.map((j) => [j.job_id, j.fan_out?.node])).toEqual([[jobNodeId(job_id, 'lone'), 'lone']]);
    const id = jobNodeId(job_id, 'lone');
    const second = { id: 'e-tampered-claim', type: 'jobnode.claimed', time: new Date().toISOString(), aggregate: { kind: 'jobnode' as const, id }, queue, data: { run_id: 'r-intruder', worker: 'w', host: 'h', pid: 1, lease_ms: 1_000 }, meta: { node: 'tamper' } };
    const seq = await commitAsDeposed(node, jsm, queue, [second]);

    const messages = [];
    for await (const m of readLog(nc)) messages.push(m);
    const { violations } = auditMessages(messages);
    expect(violations.map((v) => [v.rule, v.aggregate, v.seq, v.index])).toEqual([['illegal_transition', `jobnode:${id}`, seq, 0]]);
    expect(violations[0]!.message).toMatch(/jobnode\.claimed .* refused by the jobnode machine in state running/);
  });
});
