/**
 * Worker-side commands: `retry`, `move`, and `work <queue> -- <command...>`, which runs a command
 * per job for workers in any language: the job as JSON on stdin and in the environment, exit 0 =
 * success, otherwise the tail of stderr is the error message; the exit code is recorded either way.
 * Each command runs in its own process group, which a cancel or a lost lease stops as a whole.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Command } from 'commander';
import type { Json } from '../../machines/index.js';
import type { WorkerJob, WorkerJobContext } from '../client/worker.js';
import { Limits } from '../commands/limits.js';
import { InvalidRequestError, NonRetryableJobError } from '../errors.js';
import type { Logger } from '../logger.js';
import { isQueueName } from '../nats/subjects.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseInteger, parseLogLevel, parsePositiveInteger, readEnvironment, serverFrom } from './options.js';
import { writeJson, writeOut } from './render.js';
import { setExitCode, withClient } from './session.js';

interface RetryFlags extends CommonFlags {
  readonly id?: string;
}

interface MoveFlags extends CommonFlags {
  readonly id?: string;
  readonly priority?: string;
  readonly before?: string;
  readonly after?: string;
}

interface WorkFlags {
  readonly server?: string;
  readonly concurrency?: string;
  readonly leaseMs?: string;
  readonly logLevel?: string;
  /** Exit code meaning "fail without retry". */
  readonly fatalExitCode?: string;
}

/** Keeps the last `limit` characters of a stream (the error message of a failed job). */
function tailCollector(limit: number): { push(chunk: Buffer): void; text(): string } {
  let text = '';
  return {
    push(chunk) {
      text = (text + chunk.toString('utf8')).slice(-limit);
    },
    text: () => text.trim(),
  };
}

/** After SIGTERM to a cancelled command's group, this long before SIGKILL. */
const KILL_GRACE_MS = 5_000;
/** After the command exits, how long its output pipes may stay open (a background child holding them). */
const PIPES_GRACE_MS = 1_000;
/** Between two attempts to reach NATS at start. */
const CONNECT_RETRY_MS = 1_000;

/**
 * The file `command` runs, or an InvalidRequestError saying why it cannot run: checked when
 * `docket work` starts, so a typo fails once instead of failing every job of the queue.
 */
export function resolveCommand(command: string, env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): string {
  const byPath = command.includes('/');
  const candidates = byPath ? [resolve(cwd, command)] : (env['PATH'] ?? '').split(delimiter).filter((dir) => dir !== '').map((dir) => join(dir, command));
  let reason = byPath ? 'no such file' : 'not found on PATH';
  for (const file of candidates) {
    let isDirectory: boolean;
    try {
      isDirectory = statSync(file).isDirectory();
    } catch {
      continue;
    }
    if (isDirectory) {
      reason = 'is a directory';
      continue;
    }
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      reason = 'not executable';
    }
  }
  throw new InvalidRequestError(`cannot run ${JSON.stringify(command)}: ${reason}`);
}

/** Signals the command's whole process group (it was spawned detached, as a group leader). */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // The group is gone already (ESRCH): nothing left to stop.
  }
}

/**
 * A failed command's error: its stderr tail and nothing else. A stack would be docket's own
 * (where this Error was made), which says nothing about the command.
 */
function commandError(message: string, fatal: boolean): Error {
  const err = fatal ? new NonRetryableJobError(message) : new Error(message);
  delete err.stack;
  return err;
}

interface CommandRun {
  readonly file: string;
  readonly args: readonly string[];
  readonly noRetryCode: number | undefined;
  /** The commands running now, for a second Ctrl-C that stops everything. */
  readonly children: Set<ChildProcess>;
}

function runCommand(run: CommandRun, job: WorkerJob, ctx: WorkerJobContext): Promise<Json> {
  return new Promise((resolvePromise, reject) => {
    // detached: its own process group, so a cancel reaches what it started too (bash -> sleep),
    // and the slot is free once the group is gone rather than when a grandchild ends.
    const child = spawn(run.file, [...run.args], {
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: {
        ...process.env,
        DOCKET_JOB_ID: job.job_id,
        DOCKET_RUN_ID: job.run_id,
        DOCKET_QUEUE: job.queue,
        DOCKET_ATTEMPT: String(job.attempt),
        DOCKET_PARAMS: JSON.stringify(job.params),
        DOCKET_KEY: JSON.stringify(job.key),
      },
    });
    run.children.add(child);
    const stdout = tailCollector(64 * 1024);
    const stderr = tailCollector(4 * 1024);
    child.stdout.on('data', stdout.push);
    child.stderr.on('data', stderr.push);
    child.stdin.on('error', () => undefined); // a command that does not read stdin
    child.stdin.end(JSON.stringify(job));
    let killTimer: NodeJS.Timeout | undefined;
    const stop = () => {
      signalGroup(child, 'SIGTERM');
      killTimer = setTimeout(() => signalGroup(child, 'SIGKILL'), KILL_GRACE_MS);
    };
    // A cancelled job or a lost lease stops the command and everything it started.
    ctx.signal.addEventListener('abort', stop, { once: true });
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let settled = false;
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(killTimer);
      ctx.signal.removeEventListener('abort', stop);
      run.children.delete(child);
      outcome();
    };
    child.once('error', (err) => settle(() => reject(commandError(`cannot run ${run.file}: ${err.message}`, true))));
    const finish = () => {
      if (exit === undefined) return;
      const { code, signal } = exit;
      if (code !== null) ctx.setExitCode(code);
      if (code === 0) {
        const out = stdout.text();
        let result: Json;
        try {
          result = out === '' ? null : (JSON.parse(out) as Json);
        } catch {
          result = { stdout: out };
        }
        settle(() => resolvePromise(result));
        return;
      }
      const message = stderr.text() || (code === null ? `killed by ${signal}` : `exited with ${code}`);
      settle(() => reject(commandError(message, code !== null && code === run.noRetryCode)));
    };
    child.once('exit', (code, signal) => {
      exit = { code, signal };
      // Output still buffered arrives before 'close'; a background process holding the pipes
      // must not hold the slot, so the pipes get a short grace and are then closed.
      setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, PIPES_GRACE_MS).unref();
    });
    child.once('close', finish);
  });
}

/** One line per reason while NATS cannot be reached at start; resolves with a connection or undefined once stopping. */
async function connectWaiting(url: string, log: Logger, stopped: Promise<void>): Promise<NatsConnection | undefined> {
  const { connectNats } = await import('../nats/connection.js');
  let said = '';
  let stopping = false;
  void stopped.then(() => (stopping = true));
  while (!stopping) {
    try {
      return await connectNats({ servers: url, name: 'docket-work' });
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      if (reason !== said) log.warn({ reason }, `cannot reach NATS at ${url}; waiting for NATS`);
      said = reason;
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([stopped, new Promise<void>((r) => (timer = setTimeout(r, CONNECT_RETRY_MS)))]);
    clearTimeout(timer);
  }
  return undefined;
}

/** Says when the connection drops and comes back (nats.js reconnects by itself, for ever). */
async function watchConnection(nc: NatsConnection, url: string, log: Logger): Promise<void> {
  for await (const status of nc.status()) {
    if (status.type === 'disconnect') log.warn(`lost NATS at ${url}; waiting for NATS`);
    else if (status.type === 'reconnect') log.info(`NATS at ${url} is back`);
  }
}

async function workAction(queue: string, argv: readonly string[], flags: WorkFlags): Promise<void> {
  if (argv.length === 0) throw new InvalidRequestError('give the command to run after --, e.g. docket work thumbnails -- ./make-thumb.sh');
  const file = resolveCommand(argv[0]!);
  const [{ Worker }, { createLogger }, { DEFAULT_NATS_URL }] = await Promise.all([import('../client/worker.js'), import('../logger.js'), import('../nats/connection.js')]);
  const env = readEnvironment();
  const logger = createLogger({ level: flags.logLevel ? parseLogLevel(flags.logLevel) : (env.logLevel ?? 'info'), pretty: process.stderr.isTTY === true });
  const noRetryCode = flags.fatalExitCode === undefined ? undefined : parseInteger(flags.fatalExitCode, '--fatal-exit-code');
  const concurrency = flags.concurrency === undefined ? 1 : parsePositiveInteger(flags.concurrency, '--concurrency');
  const leaseMs = flags.leaseMs === undefined ? undefined : parsePositiveInteger(flags.leaseMs, '--lease-ms');
  // What the Worker would refuse is refused before connecting: with NATS down, the user would
  // otherwise see "waiting for NATS" rather than the mistake.
  if (!isQueueName(queue)) throw new InvalidRequestError(`queue must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(queue)}`);
  if (leaseMs !== undefined && (leaseMs < Limits.MinLeaseMs || leaseMs > Limits.MaxLeaseMs)) {
    throw new InvalidRequestError(`--lease-ms must be ${Limits.MinLeaseMs}..${Limits.MaxLeaseMs}, got ${leaseMs}`);
  }
  const url = serverFrom(flags.server) ?? DEFAULT_NATS_URL;
  const run: CommandRun = { file, args: argv.slice(1), noRetryCode, children: new Set() };
  const log = logger.child({ component: 'work', queue });

  // First signal: stop claiming, let the commands running finish (drain). Second: stop them too.
  let stopRequested!: () => void;
  const stopped = new Promise<void>((r) => (stopRequested = r));
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals === 1) {
      log.info({ signal, running: run.children.size }, 'stopping: finishing the commands running');
      stopRequested();
      return;
    }
    log.warn({ signal, running: run.children.size }, 'stopping now: killing the commands running');
    for (const child of run.children) signalGroup(child, 'SIGKILL');
    process.exit(1);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const startedAt = Date.now();
  const nc = await connectWaiting(url, log, stopped);
  if (nc === undefined) return;
  void watchConnection(nc, url, log);
  const worker = new Worker({
    queue,
    nc,
    concurrency,
    ...(leaseMs === undefined ? {} : { leaseMs }),
    logger,
    handler: (job, ctx) => runCommand(run, job, ctx),
  });
  await worker.start();
  log.info({ concurrency, command: argv[0] }, `working on ${url}`);
  await stopped;
  await worker.close();
  await nc.drain().catch(() => undefined);
  log.info({ ...worker.counts, durationMs: Date.now() - startedAt }, 'stopped');
  // The flush of pino's sync destination is done; main exits with 0.
}

export function registerWorkCommands(program: Command): void {
  withCommonOptions(
    program
      .command('retry')
      .description('retry a failed (or cancelled) job by hand: a new job with retry_of')
      .argument('<job_id>', 'the failed job')
      .option('--id <command-id>', 'command id'),
  ).action(async (jobId: string, flags: RetryFlags) => {
    const result = await withClient(flags, (client) => client.request<{ job_id: string; status: string; created: boolean; retry_of: string }>('retry', { job_id: jobId, ...(flags.id === undefined ? {} : { id: flags.id }) }));
    if (flags.json) writeJson({ ok: true, job_id: result.job_id, status: result.status, created: result.created, retry_of: result.retry_of });
    else writeOut(`${result.created ? 'created' : 'already existed:'} retry ${result.job_id} of ${result.retry_of} (${result.status})`);
    setExitCode(0);
  });

  withCommonOptions(
    program
      .command('move')
      .description('reorder a queued job: new priority, or before/after another queued job')
      .argument('<job_id>', 'the job to move')
      .option('--priority <n>', '0..255, lower runs first')
      .option('--before <job_id>', 'put it just before this job')
      .option('--after <job_id>', 'put it just after this job')
      .option('--id <command-id>', 'command id'),
  ).action(async (jobId: string, flags: MoveFlags) => {
    const body = {
      job_id: jobId,
      ...(flags.priority === undefined ? {} : { priority: parseInteger(flags.priority, '--priority') }),
      ...(flags.before === undefined ? {} : { before: flags.before }),
      ...(flags.after === undefined ? {} : { after: flags.after }),
      ...(flags.id === undefined ? {} : { id: flags.id }),
    };
    const result = await withClient(flags, (client) => client.request<{ job_id: string; status: string; priority: number; position: number | null }>('move', body));
    if (flags.json) writeJson({ ok: true, job_id: result.job_id, status: result.status, priority: result.priority, position: result.position });
    else writeOut(`job ${result.job_id} now at priority ${result.priority}, position ${result.position ?? 'its submit order'}`);
    setExitCode(0);
  });

  program
    .command('work')
    .description('run a command per job of <queue>: job JSON on stdin and in DOCKET_* env; exit 0 = success, else stderr tail = error')
    .argument('<queue>', 'queue name')
    .argument('<command...>', 'the command and its arguments (after --)')
    .option('-s, --server <url>', 'NATS server URL (default: $NATS_URL, else nats://127.0.0.1:4222)')
    .option('--concurrency <n>', 'commands run at once (default 1)')
    .option('--lease-ms <n>', 'lease per claim; heartbeats every third (default 30000)')
    .option('--fatal-exit-code <code>', 'this exit code fails the job without a retry')
    .option('--log-level <level>', 'trace|debug|info|warn|error|fatal|silent')
    .action(async (queue: string, argv: string[], flags: WorkFlags) => workAction(queue, argv, flags));
}
