/**
 * The CLI's edges a newcomer hits: output into a closed pipe, `submit --file` (flags it refuses,
 * errors one line per file line, batches cut by bytes as well as jobs), a request over the
 * server's max_payload, and `submit --wait`. `node bin/docket.js` against this file's nats-server
 * and an in-process node.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { NonRetryableJobError } from '../../src/errors.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

const ROOT = join(import.meta.dirname, '..', '..');
let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let dir: string;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startNode({ servers: server.url });
  client = await Client.connect({ servers: server.url });
  dir = mkdtempSync(join(tmpdir(), 'docket-cli-submit-'));
});

afterAll(async () => {
  await client?.close();
  await node?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** `docket <args> --server <this file's server>`; `closedStdout` closes the reading end at once. */
function docket(args: readonly string[], options: { closedStdout?: boolean } = {}): Promise<Run> {
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'docket.js'), ...args], {
    cwd: ROOT,
    env: { ...process.env, NATS_URL: server.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  if (options.closedStdout) child.stdout.destroy();
  else child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

test('writing into a closed pipe ends the command quietly', async () => {
  const queue = uniqueQueue('pipe');
  await client.submit({ queue, params: {} });
  for (const args of [['progress'], ['jobs', queue], ['--help']]) {
    const run = await docket(args, { closedStdout: true });
    expect({ args, code: run.code, stderr: run.stderr }).toEqual({ args, code: 0, stderr: '' });
  }
});

test('--file refuses --params and --wait, and names each refused line on a line of its own', async () => {
  const queue = uniqueQueue('file-errors');
  const file = join(dir, 'bad.jsonl');
  writeFileSync(file, ['{"params":{"a":1}}', '{"priority":999}', '{"params":{"a":3},"bogus":1}', '', '{"max_attempts":0,"priority":-1}'].join('\n'));

  const withParams = await docket(['submit', queue, '--file', file, '--params', '{"a":1}']);
  expect(withParams.code).toBe(1);
  expect(withParams.stderr).toBe("error invalid_request: --params is one job's params; give params per line in --file\n");
  const withWait = await docket(['submit', queue, '--file', file, '--wait']);
  expect(withWait.stderr).toBe('error invalid_request: --wait follows one job; it cannot be used with --file\n');

  const refused = await docket(['submit', queue, '--file', file]);
  expect(refused.code).toBe(1);
  expect(refused.stderr.split('\n')).toEqual([
    'error invalid_request: 3 lines refused (nothing from line 1 on was submitted; the 0 jobs before it were)',
    'line 2: priority: Too big: expected number to be <=255',
    'line 3: unknown field bogus',
    'line 5: priority: Too small: expected number to be >=0; max_attempts: Too small: expected number to be >=1',
    '',
  ]);
  expect((await client.list({ queue })).jobs).toEqual([]);
});

test('a file of jobs bigger than max_payload in all is sent in batches cut by bytes', async () => {
  const queue = uniqueQueue('file-bytes');
  const file = join(dir, 'big.jsonl');
  // 40 jobs of ~60 KiB params (each within the 64 KiB limit): ~2.4 MB, over 1 MiB twice over.
  const params = 'x'.repeat(60 * 1024);
  writeFileSync(file, Array.from({ length: 40 }, (_, i) => JSON.stringify({ params: { i, params } })).join('\n'));
  const run = await docket(['submit', queue, '--file', file, '--json']);
  expect(run.stderr).toBe('');
  expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, total: 40, created: 40, failed: 0 });
  expect(run.code).toBe(0);
});

test('a request over the server max_payload is refused as invalid_request with the limit', async () => {
  const queue = uniqueQueue('too-big');
  const error = await client.submit({ queue, params: { s: 'x'.repeat(1024 * 1024) } }).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toMatchObject({ code: 'invalid_request', details: { max_payload: 1024 * 1024 } });
  expect((error as Error).message).toMatch(/^the request \(\d+ bytes\) exceeds the server's max payload of 1048576 bytes$/);
});

test('submit --wait prints the result when the job ends and exits 0 only on success', async () => {
  const queue = uniqueQueue('wait');
  const worker = new Worker({
    queue,
    nc: client.nc,
    handler: (job, ctx) => {
      ctx.setExitCode(job.params['fail'] ? 4 : 0);
      if (job.params['fail']) throw new NonRetryableJobError('boom');
      return { doubled: Number(job.params['n']) * 2 };
    },
  });
  await worker.start();
  try {
    const ok = await docket(['submit', queue, '--params', '{"n":21}', '--wait']);
    expect(ok.stdout).toMatch(/^job \w+ succeeded: \{"doubled":42\}\n$/);
    expect(ok.code).toBe(0);

    const failed = await docket(['submit', queue, '--params', '{"fail":true}', '--wait']);
    expect(failed.stdout).toMatch(/^job \w+ failed: boom \(exit code 4\)\n$/);
    expect(failed.code).toBe(1);

    const json = await docket(['submit', queue, '--params', '{"fail":true}', '--wait', '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: false, status: 'failed', run: { exit_code: 4, error: { message: 'boom' } } });
    expect(json.code).toBe(1);
  } finally {
    await worker.close();
  }
});
