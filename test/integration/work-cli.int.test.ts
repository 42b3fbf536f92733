/**
 * `docket work <queue> -- <command>` as a subprocess: the job arrives as JSON on stdin and in
 * DOCKET_* variables; exit 0 succeeds with stdout as the result; another exit fails the run with
 * the tail of stderr; --fatal-exit-code fails it without a retry; SIGTERM drains and exits 0.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { Client } from '../../src/client/client.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

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

  const worker = spawn(process.execPath, [join(ROOT, 'bin', 'docket.js'), 'work', queue, '--server', server.url, '--concurrency', '2', '--fatal-exit-code', '7', '--log-level', 'warn', '--', process.execPath, '-e', SCRIPT], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  worker.stderr.on('data', (c: Buffer) => (stderr += c.toString()));

  // ok succeeds; flaky fails twice (attempt 1 and its retry); fatal fails once, no retry.
  const ends: { type: string; subject: string }[] = [];
  for await (const { event, subject } of done) {
    ends.push({ type: event.type, subject });
    if (ends.length === 4) break;
  }
  const exited = new Promise<number | null>((resolve) => worker.once('exit', (code) => resolve(code)));
  worker.kill('SIGTERM');
  expect(await exited, stderr).toBe(0);

  const okJob = await client.get(ok.job_id);
  expect(okJob.job.status).toBe('succeeded');
  expect(okJob.run?.result).toEqual({ id: ok.job_id, env: ok.job_id, attempt: '1', params: { n: 1 } });

  const fatalJob = await client.get(fatal.job_id);
  expect(fatalJob.job.status).toBe('failed');
  expect(fatalJob.run?.error).toMatchObject({ message: 'went wrong: 7', retryable: false });
  const list = await client.list({ queue });
  expect(list.jobs.filter((j) => j.retry_of === fatal.job_id)).toHaveLength(0);

  const retries = list.jobs.filter((j) => j.retry_of === flaky.job_id);
  expect(retries).toHaveLength(1);
  expect(retries[0]).toMatchObject({ attempt: 2, status: 'failed' });
  expect((await client.get(flaky.job_id)).run?.error).toMatchObject({ message: 'went wrong: 3', retryable: true });
  expect(ends.filter((e) => e.type === 'job.failed')).toHaveLength(3);
});
