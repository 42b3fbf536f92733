/**
 * The read side as a user sees it (issue 16, "Views"): the `delayed` count of progress and the
 * `delayed` filter of list, on the node's clock; cancelled jobs counted as `cancelled`, apart
 * from DataJoint's `ignore`; a queue the node never saw and an unknown event type said so by the
 * CLI.
 *
 * One server and one node for the file, on a ManualClock: a job is delayed until a test advances
 * the clock past its run_at, never by sleeping. The CLI runs as a user runs it, `node
 * bin/docket.js` (the build of the sources, made by the integration project's globalSetup).
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { JOB_EVENT_TYPES } from '../../machines/index.js';
import type { Client } from '../../src/client/client.js';
import { ManualClock } from '../../src/clock.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete } from '../support/worker-helpers.js';
import { closeTestFile, connectTestClients, openResources, request, startTrackedNode, uniqueQueue } from '../support/docket.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(ROOT, 'bin', 'docket.js');

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
const clock = new ManualClock(Date.parse('2026-05-01T08:00:00.000Z'));

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { clock, nodeName: 'views' });
  ({ client, nc } = await connectTestClients(server, 'views-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

afterEach(() => {
  expect(openResources()).toHaveLength(1);
});

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A CLI run that has not ended by then is killed (its code is then null): a refusal must come at once. */
const CLI_DEADLINE_MS = 20_000;

/** `docket <args> --server <this file's server>`, without the developer's NATS settings. */
function docket(args: string[]): Promise<Run> {
  const env = { ...process.env };
  for (const name of ['NATS_URL', 'DOCKET_LOG_LEVEL', 'DOCKET_LOCAL_NATS_PORT']) delete env[name];
  const child = spawn(process.execPath, [BIN, ...args, '--server', server.url], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  // `docket tail` follows the log until stopped: one that does not refuse its flags would
  // otherwise outlive the test.
  const deadline = setTimeout(() => child.kill('SIGKILL'), CLI_DEADLINE_MS);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(deadline);
      resolve({ code, stdout, stderr });
    });
  });
}

async function submit(queue: string, spec: Record<string, unknown> = {}): Promise<string> {
  return (await client.submit({ queue, ...spec } as Parameters<Client['submit']>[0])).job_id;
}

async function progressOf(queue: string) {
  const [progress] = await client.progress(queue);
  return progress!;
}

async function listIds(queue: string, status: string): Promise<string[]> {
  return (await client.list({ queue, status })).jobs.map((j) => j.job_id);
}

describe('delayed: queued jobs whose run_at has not come by the node clock', () => {
  test('progress counts them apart from the ready ones, until the clock reaches their run_at', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ready = await submit(queue);
    const soon = await submit(queue, { delay_ms: 2_000 });
    const later = await submit(queue, { delay_ms: 5_000 });

    expect(await progressOf(queue)).toMatchObject({ queue, pending: 3, delayed: 2, counts: { queued: 3 }, total: 3 });
    // The list of all queues carries the same count.
    expect((await client.progress()).find((p) => p.queue === queue)).toMatchObject({ delayed: 2, pending: 3 });

    clock.advance(2_000);
    expect(await progressOf(queue)).toMatchObject({ pending: 3, delayed: 1 });
    expect(await listIds(queue, 'delayed')).toEqual([later]);

    clock.advance(3_000);
    expect(await progressOf(queue)).toMatchObject({ pending: 3, delayed: 0 });
    expect(await listIds(queue, 'delayed')).toEqual([]);
    expect(await listIds(queue, 'queued')).toEqual([ready, soon, later]);
  });

  test('a delayed job that ends (cancelled) leaves the count; the claim order is unchanged', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const first = await submit(queue, { delay_ms: 1_000 });
    const second = await submit(queue, { delay_ms: 1_000 });
    const now = await submit(queue);
    expect(await progressOf(queue)).toMatchObject({ delayed: 2 });

    await client.cancel(first);
    expect(await progressOf(queue)).toMatchObject({ delayed: 1, pending: 2, cancelled: 1 });
    expect(await listIds(queue, 'delayed')).toEqual([second]);

    // Counting delayed jobs promotes nothing early: only the ready job can be claimed.
    const claimed = await claim(nc, queue, { max: 10 });
    expect(claimed.map((j) => j.job_id)).toEqual([now]);
    expect(await complete(nc, queue, claimed[0]!)).toMatchObject({ ok: true });
    expect(await progressOf(queue)).toMatchObject({ delayed: 1, pending: 1, success: 1 });

    clock.advance(1_000);
    expect(await progressOf(queue)).toMatchObject({ delayed: 0, pending: 1 });
    // Cancel the last so no job of this test stays live.
    await client.cancel(second);
  });

  test('a promoted job (docket promote) is no longer delayed', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const job = await submit(queue, { delay_ms: 60_000 });
    expect(await progressOf(queue)).toMatchObject({ delayed: 1 });
    const promoted = await docket(['promote', job]);
    expect(promoted).toMatchObject({ code: 0, stdout: `job ${job} queued, due from ${new Date(clock.now()).toISOString()}\n` });
    expect(await progressOf(queue)).toMatchObject({ delayed: 0, pending: 1 });
    // Due now, it cannot be promoted again: the CLI says why and exits 1.
    expect(await docket(['promote', job])).toMatchObject({ code: 1, stderr: expect.stringContaining('already due') });
    expect(await listIds(queue, 'delayed')).toEqual([]);
    expect(await listIds(queue, 'queued')).toEqual([job]);
    await client.cancel(job);
  });

  test('list: --status delayed is queued with a future run_at; queued keeps meaning the state', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const ready = await submit(queue);
    const delayed = await submit(queue, { delay_ms: 60_000 });
    const cancelled = await submit(queue, { delay_ms: 60_000 });
    await client.cancel(cancelled);

    expect(await listIds(queue, 'delayed')).toEqual([delayed]);
    expect(await listIds(queue, 'queued')).toEqual([ready, delayed]);
    // A bad status is still refused, naming the field.
    const refused = await request(nc, 'list', { queue, status: 'sleeping' });
    expect(refused).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    expect(JSON.stringify(refused)).toContain('status');

    const [table, json] = await Promise.all([docket(['jobs', queue, '--status', 'delayed']), docket(['jobs', queue, '--status', 'delayed', '--json'])]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain(delayed);
    expect(table.stdout).not.toContain(ready);
    expect(json.code, json.stderr).toBe(0);
    expect((JSON.parse(json.stdout) as { jobs: { job_id: string; status: string }[] }).jobs).toEqual([
      expect.objectContaining({ job_id: delayed, status: 'queued' }),
    ]);
    await Promise.all([client.cancel(ready), client.cancel(delayed)]);
  });

  test('docket progress shows the delayed and cancelled columns', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    await submit(queue, { delay_ms: 60_000 });
    await submit(queue, { delay_ms: 60_000 });
    const gone = await submit(queue);
    await client.cancel(gone);

    const [table, json] = await Promise.all([docket(['progress', queue]), docket(['progress', queue, '--json'])]);
    expect(table.code, table.stderr).toBe(0);
    // The first table (DataJoint's view): its rows are the lines with cells between '│'.
    const [header, row] = table.stdout
      .split('\n')
      .filter((line) => line.startsWith('│'))
      .map((line) => line.split('│').slice(1, -1).map((cell) => cell.trim()));
    expect(header).toEqual(['queue', 'pending', 'delayed', 'reserved', 'success', 'error', 'ignore', 'cancelled', 'total']);
    expect(row).toEqual([queue, '2', '2', '0', '0', '0', '0', '1', '3']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: true, queues: [{ queue, pending: 2, delayed: 2, ignore: 0, cancelled: 1, total: 3 }] });
    for (const { job_id } of (await client.list({ queue, status: 'queued' })).jobs) await client.cancel(job_id);
  });
});

describe('cancelled is its own count, not DataJoint ignore', () => {
  test('progress: ignore = ignored + skipped, cancelled beside it', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const a = await submit(queue);
    await submit(queue);
    await client.cancel(a);
    expect(await progressOf(queue)).toEqual({
      queue,
      counts: { waiting: 0, queued: 1, running: 0, succeeded: 0, failed: 0, cancelled: 1, skipped: 0, ignored: 0 },
      pending: 1,
      delayed: 0,
      reserved: 0,
      success: 0,
      error: 0,
      ignore: 0,
      cancelled: 1,
      total: 2,
      flow: { status: 'active', held: null, waiting_by_reason: {} },
    });
    for (const { job_id } of (await client.list({ queue, status: 'queued' })).jobs) await client.cancel(job_id);
  });
});

describe('an unknown queue or event type is said so', () => {
  test('docket.cmd.progress still answers a queue never seen with zeros; the CLI says it has no jobs', async ({ task }) => {
    const nope = uniqueQueue(`${task.name}-nope`);
    // Scripts that relied on zeros keep them.
    expect(await progressOf(nope)).toMatchObject({ queue: nope, total: 0, pending: 0, delayed: 0 });

    const [progress, jobs, jobsJson] = await Promise.all([docket(['progress', nope]), docket(['jobs', nope]), docket(['jobs', nope, '--json'])]);
    expect(progress.code, progress.stderr).toBe(0);
    expect(progress.stdout.trim()).toBe(`no queue ${nope}: no job was ever submitted to it`);
    expect(jobs.code, jobs.stderr).toBe(0);
    expect(jobs.stdout.trim()).toBe(`no queue ${nope}: no job was ever submitted to it`);
    expect(JSON.parse(jobsJson.stdout)).toEqual({ ok: true, jobs: [], next_cursor: null });
  });

  test('a known queue with no job in the filter is not called unknown', async ({ task }) => {
    const queue = uniqueQueue(task.name);
    const job = await submit(queue);
    const run = await docket(['jobs', queue, '--status', 'failed']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.trim()).toBe(`no jobs in ${queue} with status failed`);
    await client.cancel(job);
  });

  test('docket tail --type refuses an unknown event type, naming the known ones', async () => {
    const [bogus, mixed] = await Promise.all([docket(['tail', '--type', 'job.bogus']), docket(['tail', '--type', 'job.submitted,job.finished', '--json'])]);
    expect(bogus.code).toBe(1);
    expect(bogus.stdout).toBe('');
    expect(bogus.stderr).toMatch(/^error invalid_request: .*unknown event type "job\.bogus"/);
    for (const type of JOB_EVENT_TYPES) expect(bogus.stderr).toContain(type);
    // With --json the refusal is the JSON error; the known type in the list is not named unknown.
    expect(mixed.code).toBe(1);
    const refusal = JSON.parse(mixed.stdout) as { ok: boolean; error: { code: string; message: string } };
    expect(refusal).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    expect(refusal.error.message).toMatch(/^--type: unknown event type "job\.finished"; known types: job\.submitted, /);
  });
});
