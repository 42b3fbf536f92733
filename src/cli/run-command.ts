/**
 * Running one command for one job, as `docket work` and `docket populate` do: the job (or its key)
 * as JSON on stdin and in DOCKET_* environment variables, exit 0 = success (stdout, as JSON when
 * it parses, is the result), otherwise the tail of stderr is the error message; the exit code is
 * recorded either way. Each command runs in its own process group, which a cancel or a lost lease
 * stops as a whole.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import type { Json } from '../../machines/index.js';
import type { WorkerJob, WorkerJobContext } from '../client/worker.js';
import { InvalidRequestError, NonRetryableJobError } from '../errors.js';
import type { Logger } from '../logger.js';

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
export function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
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

export interface CommandRun {
  readonly file: string;
  readonly args: readonly string[];
  readonly noRetryCode: number | undefined;
  /** The commands running now, for a second Ctrl-C that stops everything. */
  readonly children: Set<ChildProcess>;
  /** What the command reads on stdin: `docket work` gives the whole job, `docket populate` its key. */
  readonly stdin: 'job' | 'key';
}

export function runCommand(run: CommandRun, job: WorkerJob, ctx: WorkerJobContext): Promise<Json> {
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
        // A fan-out job's entry for this node: the job, the node, all the job's nodes (README "Fan-out jobs").
        ...(job.fan_out === undefined ? {} : { DOCKET_FAN_OUT_JOB_ID: job.fan_out.job_id, DOCKET_NODE: job.fan_out.node, DOCKET_FAN_OUT_NODES: job.fan_out.nodes.join(',') }),
      },
    });
    run.children.add(child);
    const stdout = tailCollector(64 * 1024);
    const stderr = tailCollector(4 * 1024);
    child.stdout.on('data', stdout.push);
    child.stderr.on('data', stderr.push);
    child.stdin.on('error', () => undefined); // a command that does not read stdin
    child.stdin.end(JSON.stringify(run.stdin === 'job' ? job : job.key));
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

export interface Stop {
  /** Resolves at the first SIGINT/SIGTERM. */
  readonly requested: Promise<void>;
  readonly isRequested: () => boolean;
  readonly dispose: () => void;
}

/** First SIGINT/SIGTERM: stop taking jobs and let the running commands end. Second: kill them and exit. */
export function onStopSignals(run: CommandRun, log: Logger, what = 'no more keys'): Stop {
  let requested = false;
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  const handler = (signal: NodeJS.Signals) => {
    if (!requested) {
      requested = true;
      log.warn({ signal, running: run.children.size }, `stopping: ${what}; the running commands finish`);
      resolve();
      return;
    }
    log.warn({ signal, running: run.children.size }, 'stopping now: killing the running commands');
    for (const child of run.children) signalGroup(child, 'SIGKILL');
    process.exit(1);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return {
    requested: promise,
    isRequested: () => requested,
    dispose: () => {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}
