/**
 * The CLI as a user runs it: `node bin/docket.js ...` subprocesses against this file's own
 * nats-server and a `docket up` child started here. Each CLI process costs ~0.5 s, so
 * independent invocations run side by side.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SMALL_MACHINE_CORES } from '../../src/cli/local-nats.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(ROOT, 'bin', 'docket.js');

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** The environment a child gets: none of the developer's docket/NATS settings leak in. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ['NATS_URL', 'DOCKET_LOG_LEVEL', 'DOCKET_LOCAL_NATS_PORT', 'DOCKET_LIVE_EVENTS', 'GOMAXPROCS']) delete env[name];
  return { ...env, ...extra };
}

function queueFor(name: string): string {
  return `cli-${name}-${randomBytes(3).toString('hex')}`;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/** A `docket up` child: its parsed JSON log lines so far, and a way to stop it. */
interface UpProcess {
  readonly child: ChildProcess;
  readonly lines: () => Record<string, unknown>[];
  readonly raw: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

async function startUp(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<UpProcess> {
  const child = spawn(process.execPath, [BIN, 'up', ...args], {
    cwd: options.cwd ?? ROOT,
    env: options.env ?? cleanEnv(),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let raw = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const parsed = () =>
    raw
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    raw += chunk;
  });
  await new Promise<void>((resolve, reject) => {
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`docket up exited with ${code}:\n${raw}`));
    };
    const onData = () => {
      if (!parsed().some((l) => l['msg'] === 'serving')) return;
      clearTimeout(timer);
      child.off('exit', onExit);
      child.stderr!.off('data', onData);
      resolve();
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`docket up did not serve in 30 s:\n${raw}`));
    }, 30_000);
    child.once('exit', onExit);
    child.stderr!.on('data', onData);
  });
  return {
    child,
    lines: parsed,
    raw: () => raw,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
        const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
        const code = await exited;
        clearTimeout(timer);
        return code;
      }
      return child.exitCode;
    },
  };
}

let server: TestNatsServer;
let up: UpProcess;
let dataDir: string;

/** Runs `docket <args>` against this file's server; resolves when it exits. */
function docket(args: string[], options: { env?: NodeJS.ProcessEnv; input?: string; cwd?: string } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: options.cwd ?? ROOT,
      env: options.env ?? cleanEnv({ NATS_URL: server.url }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.input ?? '');
  });
}

function json(run: Run): Record<string, unknown> {
  try {
    return JSON.parse(run.stdout) as Record<string, unknown>;
  } catch {
    throw new Error(`stdout is not one JSON document (exit ${run.code}):\n${run.stdout}\nstderr:\n${run.stderr}`);
  }
}

beforeAll(async () => {
  server = await startNatsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'docket-cli-'));
  up = await startUp(['--server', server.url, '--data-dir', dataDir]);
});

afterAll(async () => {
  await up?.stop();
  await server?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe('docket CLI against a docket up child', () => {
  it('up logs JSON lines when stderr is not a terminal, ending in serving', () => {
    const serving = up.lines().find((l) => l['msg'] === 'serving');
    expect(serving).toMatchObject({ level: 30, stream: 'DOCKET' });
  });

  it('submit, jobs, show, cancel and progress, as tables and as --json', async () => {
    const queue = queueFor('flow');
    const first = await docket(['submit', queue, '--params', '{"n":1}', '--key', '{"subject_id":42}', '--priority', '3']);
    expect(first.code, first.stderr).toBe(0);
    const jobId = /created job (\S+) \(queued\)/.exec(first.stdout)?.[1];
    expect(jobId).toBeDefined();

    // The same key again: the live job comes back, nothing new; a second, keyless job.
    const [again, second] = await Promise.all([
      docket(['submit', queue, '--key', '{"subject_id":42}', '--json']),
      docket(['submit', queue, '--params', '{"n":2}', '--delay-ms', '0', '--max-attempts', '3', '--json']),
    ]);
    expect(json(again)).toEqual({ ok: true, job_id: jobId, status: 'queued', created: false });
    const secondReply = json(second);
    expect(secondReply).toMatchObject({ ok: true, status: 'queued', created: true });
    const secondId = secondReply['job_id'] as string;

    const [jobsTable, jobsJson, showTable, showJson] = await Promise.all([
      docket(['jobs', queue]),
      docket(['jobs', queue, '--json', '--limit', '1']),
      docket(['show', jobId!]),
      docket(['show', jobId!, '--json']),
    ]);
    expect(jobsTable.code, jobsTable.stderr).toBe(0);
    expect(jobsTable.stdout).toContain(jobId);
    expect(jobsTable.stdout).toContain(secondId);
    expect(jobsTable.stdout).toMatch(/job_id.*status.*priority/);
    const page = json(jobsJson) as { ok: boolean; jobs: { job_id: string; status: string; priority: number; key: unknown }[]; next_cursor: string | null };
    expect(page.ok).toBe(true);
    expect(page.jobs).toHaveLength(1);
    expect(page.jobs[0]).toMatchObject({ job_id: jobId, status: 'queued', priority: 3, key: { subject_id: 42 } });
    expect(page.next_cursor).not.toBeNull();
    const next = json(await docket(['jobs', queue, '--json', '--cursor', page.next_cursor!])) as typeof page;
    expect(next.jobs.map((j) => j.job_id)).toEqual([secondId]);
    expect(next.next_cursor).toBeNull();

    expect(showTable.code, showTable.stderr).toBe(0);
    expect(showTable.stdout).toContain('job.submitted');
    expect(showTable.stdout).toContain('{"n":1}');
    const detail = json(showJson) as { ok: boolean; job: Record<string, unknown>; run: unknown; history: { type: string; seq: number }[] };
    expect(detail.ok).toBe(true);
    expect(detail.job).toMatchObject({ job_id: jobId, queue, status: 'queued', params: { n: 1 }, priority: 3 });
    expect(detail.run).toBeNull();
    expect(detail.history.map((h) => h.type)).toEqual(['job.submitted']);

    const cancelled = await docket(['cancel', jobId!, '--reason', 'not needed']);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.stdout).toContain(`job ${jobId} cancelled`);

    // Cancelling again is refused by the machine, in both output modes.
    const [twice, twiceJson, progressTable, progressJson] = await Promise.all([
      docket(['cancel', jobId!]),
      docket(['cancel', jobId!, '--json']),
      docket(['progress', queue]),
      docket(['progress', queue, '--json']),
    ]);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toMatch(/^error invalid_transition: /);
    expect(twice.stdout).toBe('');
    expect(twiceJson.code).toBe(1);
    expect(json(twiceJson)).toMatchObject({ ok: false, error: { code: 'invalid_transition' } });

    expect(progressTable.code, progressTable.stderr).toBe(0);
    for (const column of ['pending', 'delayed', 'reserved', 'success', 'error', 'ignore', 'cancelled', 'total', 'queued']) {
      expect(progressTable.stdout).toContain(column);
    }
    expect(json(progressJson)).toEqual({
      ok: true,
      queues: [
        {
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
        },
      ],
    });

    const afterCancel = json(await docket(['show', jobId!, '--json'])) as typeof detail;
    expect(afterCancel.job['status']).toBe('cancelled');
    expect(afterCancel.history.map((h) => h.type)).toEqual(['job.submitted', 'job.cancelled']);
  });

  it('bad input exits 1 with invalid_request, named, and submits nothing', async () => {
    const queue = queueFor('bad');
    const runs = await Promise.all([
      docket(['submit', 'no spaces allowed']),
      docket(['submit', queue, '--priority', '999']),
      docket(['submit', queue, '--priority', 'high']),
      docket(['submit', queue, '--params', '{not json']),
      docket(['submit', queue, '--run-at', 'tomorrow']),
      docket(['submit', queue, '--no-such-flag']),
      docket(['jobs', queue, '--status', 'sleeping']),
      docket(['submit', queue, '--priority', '-1', '--json']),
    ]);
    const [badQueue, priority, priorityWord, params, runAt, unknownFlag, status, priorityJson] = runs;
    for (const run of runs.slice(0, 7)) {
      expect(run.code, run.stderr).toBe(1);
      expect(run.stderr).toMatch(/^error invalid_request: /);
    }
    expect(badQueue!.stderr).toContain('queue');
    expect(priority!.stderr).toContain('priority');
    expect(priorityWord!.stderr).toContain('--priority must be an integer');
    expect(params!.stderr).toContain('--params is not valid JSON');
    expect(runAt!.stderr).toContain('--run-at');
    expect(unknownFlag!.stderr).toContain('--no-such-flag');
    expect(status!.stderr).toContain('status');
    expect(priorityJson!.code).toBe(1);
    expect(json(priorityJson!)).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    expect((json(priorityJson!)['error'] as { message: string }).message).toContain('priority');

    const [listed, missing] = await Promise.all([docket(['jobs', queue, '--json']), docket(['show', 'no-such-job'])]);
    expect(json(listed)).toEqual({ ok: true, jobs: [], next_cursor: null });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^error not_found: /);
  });

  it('submit --file sends JSON lines as batches and reports per line', async () => {
    const queue = queueFor('file');
    const dir = mkdtempSync(join(tmpdir(), 'docket-cli-file-'));
    try {
      const lines = Array.from({ length: 30 }, (_, i) => JSON.stringify({ params: { i }, key: { i } }));
      const file = join(dir, 'jobs.jsonl');
      writeFileSync(file, `${lines.join('\n')}\n\n`);
      const first = await docket(['submit', queue, '--file', file, '--priority', '7', '--json']);
      expect(first.code, first.stderr).toBe(0);
      expect(json(first)).toEqual({ ok: true, total: 30, created: 30, existing: 0, failed: 0, failures: [] });

      // Again: every key has its live job; nothing doubles. From stdin this time, as a table.
      const again = await docket(['submit', queue, '--file', '-'], { input: `${lines.join('\n')}\n` });
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toContain('submitted 30 jobs: 0 created, 30 already live, 0 refused');

      const listed = json(await docket(['jobs', queue, '--json', '--limit', '1000'])) as { jobs: { priority: number }[] };
      expect(listed.jobs).toHaveLength(30);
      expect(new Set(listed.jobs.map((j) => j.priority))).toEqual(new Set([7]));

      // A bad line stops the file there and names it.
      const bad = join(dir, 'bad.jsonl');
      writeFileSync(bad, '{"params":{}}\n{"priority":300}\n');
      const refused = await docket(['submit', queueFor('file-bad'), '--file', bad]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toBe('error invalid_request: 1 line refused (nothing from line 1 on was submitted; the 0 jobs before it were)\nline 2: priority: Too big: expected number to be <=255\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('tail --limit prints the events, one line each, or JSON lines', async () => {
    const queue = queueFor('tail');
    const submitted = json(await docket(['submit', queue, '--json'])) as { job_id: string };
    expect((await docket(['cancel', submitted.job_id])).code).toBe(0);

    const [lines, jsonl, onlyCancelled] = await Promise.all([
      docket(['tail', '--queue', queue, '--from', 'all', '--limit', '2']),
      docket(['tail', '--queue', queue, '--from', 'all', '--limit', '2', '--json']),
      docket(['tail', '--queue', queue, '--from', 'all', '--limit', '1', '--type', 'job.cancelled', '--json']),
    ]);
    expect(lines.code, lines.stderr).toBe(0);
    const text = lines.stdout.trim().split('\n');
    expect(text).toHaveLength(2);
    expect(text[0]).toMatch(new RegExp(`job\\.submitted\\s+${queue}\\s+${submitted.job_id}`));
    expect(text[1]).toMatch(new RegExp(`job\\.cancelled\\s+${queue}\\s+${submitted.job_id}`));

    expect(jsonl.code, jsonl.stderr).toBe(0);
    const events = jsonl.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; subject: string; event: { type: string; queue: string } });
    expect(events.map((e) => e.event.type)).toEqual(['job.submitted', 'job.cancelled']);
    expect(events[0]!.subject).toBe(`docket.evt.job.${queue}.${submitted.job_id}`);
    expect(events[1]!.seq).toBeGreaterThan(events[0]!.seq);

    const cancelledOnly = JSON.parse(onlyCancelled.stdout) as { seq: number; event: { type: string } };
    expect(cancelledOnly.event.type).toBe('job.cancelled');
    expect(cancelledOnly.seq).toBe(events[1]!.seq);

    // From a sequence: starts there.
    const fromSeq = await docket(['tail', '--queue', queue, '--from', String(events[1]!.seq), '--limit', '1', '--json']);
    expect((JSON.parse(fromSeq.stdout) as { seq: number }).seq).toBe(events[1]!.seq);
  });

  it('a command with nothing to talk to exits 1 with unavailable', async () => {
    const port = await freePort();
    const [noNats, noNatsJson] = await Promise.all([
      docket(['jobs', 'q', '--server', `nats://127.0.0.1:${port}`]),
      docket(['progress', '--json'], { env: cleanEnv({ NATS_URL: `nats://127.0.0.1:${port}` }) }),
    ]);
    expect(noNats.code).toBe(1);
    expect(noNats.stderr).toMatch(/^error unavailable: cannot connect to NATS at nats:\/\/127\.0\.0\.1:\d+/);
    expect(noNatsJson.code).toBe(1);
    expect(json(noNatsJson)).toMatchObject({ ok: false, error: { code: 'unavailable' } });
  });
});

describe('docket up', () => {
  it('starts a local nats-server when no URL is given and nothing listens, says so, and stops it on SIGINT', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'docket-up-'));
    const port = await freePort();
    try {
      const local = await startUp(['--local-port', String(port)], { cwd });
      const lines = local.lines();
      const started = lines.find((l) => l['msg'] === 'started a local nats-server');
      expect(started, local.raw()).toMatchObject({ port, storeDir: join(cwd, '.data', 'nats', 'jetstream') });
      expect(started!['config']).toBe(join(ROOT, 'nats.conf'));
      // The server runs with the Go threads it says (one on a machine of two cores or fewer).
      const environ = readFileSync(`/proc/${String(started!['pid'])}/environ`, 'utf8').split('\0');
      const gomaxprocs = environ.find((entry) => entry.startsWith('GOMAXPROCS='))?.slice('GOMAXPROCS='.length) ?? 'default';
      expect(started!['gomaxprocs']).toBe(gomaxprocs);
      expect(gomaxprocs).toBe(availableParallelism() <= SMALL_MACHINE_CORES ? '1' : 'default');
      expect(lines.findIndex((l) => l['msg'] === 'started a local nats-server')).toBeLessThan(lines.findIndex((l) => l['msg'] === 'serving'));
      expect(existsSync(join(cwd, '.data', 'nats', 'jetstream'))).toBe(true);

      // It serves commands on that port.
      const submitted = await docket(['submit', 'local', '--json', '--server', `nats://127.0.0.1:${port}`], { env: cleanEnv() });
      expect(json(submitted)).toMatchObject({ ok: true, created: true });

      expect(await local.stop('SIGINT')).toBe(0);
      const messages = local.lines().map((l) => l['msg']);
      expect(messages).toContain('shutting down');
      expect(messages).toContain('stopped the local nats-server');
      expect(existsSync(join(cwd, '.data', 'docket', 'checkpoint.json'))).toBe(true);
      // The server is gone with it: nothing listens on the port any more.
      const after = await docket(['jobs', 'local', '--server', `nats://127.0.0.1:${port}`], { env: cleanEnv() });
      expect(after.stderr).toMatch(/^error unavailable: cannot connect/);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('refuses a --live-events it does not know before it starts anything, naming the choices', async () => {
    const refused = await docket(['up', '--live-events', 'sometimes', '--server', server.url], { env: cleanEnv() });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('invalid_request: --live-events must be one of commit, each, got "sometimes"');
    const fromEnv = await docket(['up', '--server', server.url], { env: cleanEnv({ DOCKET_LIVE_EVENTS: 'never' }) });
    expect(fromEnv.code).toBe(1);
    expect(fromEnv.stderr).toContain('invalid_request: DOCKET_LIVE_EVENTS must be one of commit, each, got "never"');
  });

  it('uses the nats-server already listening on the local port, via DOCKET_LOCAL_NATS_PORT', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'docket-up-'));
    try {
      const second = await startUp([], { cwd, env: cleanEnv({ DOCKET_LOCAL_NATS_PORT: String(server.port) }) });
      const messages = second.lines().map((l) => l['msg']);
      expect(messages).toContain('using the nats-server listening on 127.0.0.1');
      expect(messages).not.toContain('started a local nats-server');
      expect(existsSync(join(cwd, '.data', 'nats'))).toBe(false);
      expect(await second.stop('SIGTERM')).toBe(0);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});
