/**
 * `docket work <queue> -- <command>` as a subprocess: the job arrives as JSON on stdin and in
 * DOCKET_* variables; exit 0 succeeds with stdout as the result; another exit fails the run with
 * the tail of stderr; --fatal-exit-code fails it without a retry; SIGTERM drains and exits 0.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { Writable } from 'node:stream';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { eventually } from '../support/worker-helpers.js';

const ROOT = join(import.meta.dirname, '..', '..');
let server: TestNatsServer;
let node: DocketNode;
let client: Client;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startNode({ servers: server.url });
  client = await Client.connect({ servers: server.url });
});

afterAll(async () => {
  await client?.close();
  await node?.close();
  await server?.stop();
});

interface WorkProcess {
  readonly child: ChildProcessWithoutNullStreams;
  readonly exited: Promise<number | null>;
  /** stderr so far. */
  stderr(): string;
  /** The JSON log lines so far. */
  lines(): Record<string, unknown>[];
  /** Resolves with the first log line matching `predicate` (now or later). */
  line(predicate: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
}

/** `docket work <args>` from bin/docket.js (the build), logging JSON lines at info on stderr. */
function startWork(args: readonly string[]): WorkProcess {
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'docket.js'), 'work', '--log-level', 'info', ...args], { cwd: ROOT, stdio: 'pipe' });
  let stderr = '';
  const waiting: { predicate: (line: Record<string, unknown>) => boolean; resolve: (line: Record<string, unknown>) => void }[] = [];
  const lines = () =>
    stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
    for (const w of [...waiting]) {
      const found = lines().find(w.predicate);
      if (found) {
        waiting.splice(waiting.indexOf(w), 1);
        w.resolve(found);
      }
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    exited,
    stderr: () => stderr,
    lines,
    line: (predicate) => {
      const found = lines().find(predicate);
      return found ? Promise.resolve(found) : new Promise((resolve) => waiting.push({ predicate, resolve }));
    },
  };
}

/** A port nothing listens on, outside the ephemeral range (STACK.md: restarted servers collided there). */
async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// The job's command: echoes what it got as its result; params decide how it ends.
const SCRIPT = `
let input = '';
process.stdin.on('data', (c) => (input += c));
process.stdin.on('end', () => {
  const job = JSON.parse(input);
  if (job.params.exit) { process.stderr.write('went wrong: ' + job.params.exit); process.exit(job.params.exit); }
  process.stdout.write(JSON.stringify({ id: job.job_id, env: process.env.DOCKET_JOB_ID, attempt: process.env.DOCKET_ATTEMPT, params: JSON.parse(process.env.DOCKET_PARAMS) }));
});`;

test('runs a command per job, records results and stderr, retries unless the exit code is fatal', async () => {
  const queue = 'work-cli';
  const done = client.events({ queue, types: ['job.succeeded', 'job.failed'] });
  await done.ready;
  const ok = await client.submit({ queue, params: { n: 1 } });
  const flaky = await client.submit({ queue, params: { exit: 3 }, max_attempts: 2, backoff: { base_ms: 0, max_ms: 0, jitter: 0 } });
  const fatal = await client.submit({ queue, params: { exit: 7 }, max_attempts: 5 });

  const worker = startWork([queue, '--server', server.url, '--concurrency', '2', '--fatal-exit-code', '7', '--', process.execPath, '-e', SCRIPT]);

  // ok succeeds; flaky fails twice (attempt 1 and its retry); fatal fails once, no retry.
  const ends: { type: string; subject: string }[] = [];
  for await (const { event, subject } of done) {
    ends.push({ type: event.type, subject });
    if (ends.length === 4) break;
  }
  worker.child.kill('SIGTERM');
  expect(await worker.exited, worker.stderr()).toBe(0);

  const okJob = await client.get(ok.job_id);
  expect(okJob.job.status).toBe('succeeded');
  expect(okJob.run?.result).toEqual({ id: ok.job_id, env: ok.job_id, attempt: '1', params: { n: 1 } });
  expect(okJob.run?.exit_code).toBe(0);

  const fatalJob = await client.get(fatal.job_id);
  expect(fatalJob.job.status).toBe('failed');
  expect(fatalJob.run?.exit_code).toBe(7);
  // The stored error is the command's stderr tail: no stack of docket's own.
  expect(fatalJob.run?.error).toEqual({ message: 'went wrong: 7', retryable: false });

  // One line when a job is claimed, one when it is finished, and a summary on exit.
  const lines = worker.lines();
  expect(lines.filter((l) => l['msg'] === 'claimed')).toHaveLength(4);
  const finished = lines.filter((l) => l['msg'] === 'finished');
  expect(finished.map((l) => l['status']).sort()).toEqual(['failed', 'failed', 'failed', 'succeeded']);
  expect(finished.find((l) => l['jobId'] === ok.job_id)).toMatchObject({ exitCode: 0, durationMs: expect.any(Number) });
  expect(lines.at(-1)).toMatchObject({ msg: 'stopped', succeeded: 1, failed: 3, lost: 0 });
  expect(lines.filter((l) => l['msg'] === 'run lost its job, aborting')).toEqual([]);
  const list = await client.list({ queue });
  expect(list.jobs.filter((j) => j.retry_of === fatal.job_id)).toHaveLength(0);

  const retries = list.jobs.filter((j) => j.retry_of === flaky.job_id);
  expect(retries).toHaveLength(1);
  expect(retries[0]).toMatchObject({ attempt: 2, status: 'failed' });
  const flakyJob = await client.get(flaky.job_id);
  expect(flakyJob.run?.error).toEqual({ message: 'went wrong: 3', retryable: true });
  expect(flakyJob.run?.exit_code).toBe(3);
  expect(ends.filter((e) => e.type === 'job.failed')).toHaveLength(3);
});

test('a cancel stops the command with everything it started, and its slot is free at once', async () => {
  const queue = uniqueQueue('work-cancel');
  const pids = mkdtempSync(join(tmpdir(), 'docket-work-pids-'));
  // bash stays the parent of a sleep that holds the job's pipes: the case a plain kill misses.
  const script = 'if [ -n "$DOCKET_PARAMS" ] && [ "$DOCKET_PARAMS" != "{}" ]; then sleep 30 & echo $! > "$0/$DOCKET_JOB_ID"; wait; fi';
  const worker = startWork([queue, '--server', server.url, '--lease-ms', '1000', '--', 'bash', '-c', script, pids]);
  try {
    const done = client.events({ queue, types: ['job.succeeded'] });
    await done.ready;
    const slow = await client.submit({ queue, params: { sleep: true } });
    await eventually(() => {
      try {
        return readFileSync(join(pids, slow.job_id), 'utf8').trim() !== '';
      } catch {
        return false;
      }
    }, 'the command started its sleep');
    const sleepPid = Number(readFileSync(join(pids, slow.job_id), 'utf8'));
    expect(alive(sleepPid)).toBe(true);

    await client.cancel(slow.job_id);
    const cancelledAt = Date.now();
    const quick = await client.submit({ queue, params: {} });
    for await (const { subject } of done) {
      if (subject.endsWith(`.${quick.job_id}`)) break;
    }
    // concurrency 1: the quick job ran only once the cancelled command's group was gone.
    expect(Date.now() - cancelledAt).toBeLessThan(10_000);
    // The log's reader can see the commit before the node that wrote it has its ack: ask until
    // the node's view has it too (a few ms at most).
    let status = (await client.get(quick.job_id)).job.status;
    for (let tries = 0; status !== 'succeeded' && tries < 100; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      status = (await client.get(quick.job_id)).job.status;
    }
    expect(status).toBe('succeeded');
    await eventually(() => !alive(sleepPid), 'the grandchild sleep was stopped with its group', 5_000);
    expect((await client.get(slow.job_id)).job.status).toBe('cancelled');
  } finally {
    worker.child.kill('SIGTERM');
    expect(await worker.exited, worker.stderr()).toBe(0);
    rmSync(pids, { recursive: true, force: true });
  }
});

test('a command that cannot be started is refused when work starts, before it claims anything', async () => {
  const queue = uniqueQueue('work-refuse');
  const job = await client.submit({ queue, params: {} });
  const dir = mkdtempSync(join(tmpdir(), 'docket-work-cmd-'));
  const notExecutable = join(dir, 'script.sh');
  writeFileSync(notExecutable, '#!/bin/sh\nexit 0\n');
  chmodSync(notExecutable, 0o644);
  try {
    const cases: [string, string][] = [
      [join(dir, 'missing.sh'), 'no such file'],
      [notExecutable, 'not executable'],
      ['docket-no-such-command-anywhere', 'not found on PATH'],
      [dir, 'is a directory'],
    ];
    for (const [command, reason] of cases) {
      const worker = startWork([queue, '--server', server.url, '--', command]);
      expect(await worker.exited).toBe(1);
      expect(worker.stderr()).toBe(`error invalid_request: cannot run ${JSON.stringify(command)}: ${reason}\n`);
    }
    expect((await client.get(job.job_id)).job.status).toBe('queued');

    // Options the worker protocol refuses are refused before connecting: here nothing listens.
    const badQueue = startWork(['bad queue', '--server', 'nats://127.0.0.1:1', '--', 'true']);
    expect(await badQueue.exited).toBe(1);
    expect(badQueue.stderr()).toBe('error invalid_request: queue must match [A-Za-z0-9_-]{1,64}, got "bad queue"\n');
    const badLease = startWork([queue, '--server', 'nats://127.0.0.1:1', '--lease-ms', '10', '--', 'true']);
    expect(await badLease.exited).toBe(1);
    expect(badLease.stderr()).toBe('error invalid_request: --lease-ms must be 1000..86400000, got 10\n');
    const badPrefetch = startWork([queue, '--server', 'nats://127.0.0.1:1', '--prefetch', '1001', '--', 'true']);
    expect(await badPrefetch.exited).toBe(1);
    expect(badPrefetch.stderr()).toBe('error invalid_request: --prefetch must be 0..1000, got 1001\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('waits for NATS at start and when it goes away, in one line each, and says once that no node serves the queue', async () => {
  const queue = uniqueQueue('work-wait');
  const port = await freePort();
  const worker = startWork([queue, '--server', `nats://127.0.0.1:${port}`, '--', 'true']);
  let later: TestNatsServer | undefined;
  let otherNode: DocketNode | undefined;
  let otherClient: Client | undefined;
  try {
    await worker.line((l) => String(l['msg']).includes('waiting for NATS'));
    later = await startNatsServer({ port });
    const noNode = await worker.line((l) => l['msg'] === 'claims failing, retrying until they are answered');
    expect(noNode['reason']).toBe('no docket node is serving the queue');

    otherNode = await startNode({ servers: later.url });
    otherClient = await Client.connect({ servers: later.url });
    const job = await otherClient.submit({ queue, params: {} });
    const finished = await worker.line((l) => l['msg'] === 'finished' && l['jobId'] === job.job_id);
    expect(finished).toMatchObject({ status: 'succeeded', exitCode: 0 });
    expect(worker.lines().filter((l) => l['reason'] === 'no docket node is serving the queue')).toHaveLength(1);
    expect(worker.lines().filter((l) => String(l['msg']).includes('waiting for NATS'))).toHaveLength(1);

    later = await later.restart();
    await worker.line((l) => String(l['msg']).startsWith('lost NATS') && String(l['msg']).endsWith('waiting for NATS'));
    await worker.line((l) => String(l['msg']).endsWith('is back'));
    worker.child.kill('SIGTERM');
    expect(await worker.exited, worker.stderr()).toBe(0);
    expect(worker.lines().at(-1)).toMatchObject({ msg: 'stopped', succeeded: 1, failed: 0 });
    // Every line is a log line: no stack trace printed around them.
    expect(worker.stderr().split('\n').filter((l) => l !== '' && !l.startsWith('{'))).toEqual([]);
  } finally {
    if (worker.child.exitCode === null) worker.child.kill('SIGKILL');
    await otherClient?.close();
    await otherNode?.close();
    await later?.stop();
  }
});

test('a run that succeeded is not reported lost by a heartbeat answered after its completion', async () => {
  const queue = uniqueQueue('work-no-spurious-lost');
  const warnings: string[] = [];
  const logger = pino({ level: 'warn' }, new Writable({ write: (chunk: Buffer, _enc, done) => (warnings.push(chunk.toString()), done()) }));
  const quickJobs = 40;
  let quickDone = 0;
  let allDone!: () => void;
  const finished = new Promise<void>((r) => (allDone = r));
  // One long run sends heartbeats back to back (each names every active run, the quick ones too),
  // so many land at the leader just after a quick run's completion: the race seen in the field.
  const worker = new Worker({
    queue,
    nc: client.nc,
    concurrency: 2,
    logger,
    handler: async (job, ctx) => {
      if (job.params['pump']) {
        while (quickDone < quickJobs) await ctx.heartbeat();
        return null;
      }
      quickDone += 1;
      if (quickDone === quickJobs) allDone();
      return null;
    },
  });
  await client.submit({ queue, params: { pump: true }, priority: 0 });
  await client.submitBatch(Array.from({ length: quickJobs }, (_, i) => ({ queue, params: { i } })));
  await worker.start();
  await finished;
  await worker.close();
  expect(warnings.filter((w) => w.includes('run lost its job'))).toEqual([]);
  expect(worker.counts).toEqual({ succeeded: quickJobs + 1, failed: 0, lost: 0 });
});
