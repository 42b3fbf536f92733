/**
 * `{command: [argv...]}`: a program whose stdout is JSON lines, one key per line. It runs without
 * a shell (argv as given, nothing expanded), with the node's environment, no stdin, a timeout
 * (its process group killed with SIGKILL when it passes) and a bound on its output (Limits.MaxCommandOutputBytes).
 * Keys are yielded as lines arrive; a non-zero exit, a signal or a timeout fails the source
 * after the last line, with the end of its stderr quoted, and a refresh reads the whole source
 * before deciding, so keys printed before a failure are never used.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { InvalidRequestError } from '../errors.js';
import type { CommandSourceSpec } from '../commands/jobset-schemas.js';
import { Limits } from '../commands/limits.js';
import type { Key } from './key.js';
import { keyFromJsonLine } from './json-lines.js';
import { BATCH_KEYS, type KeySourceOptions, type RawKeySource } from './source.js';

export interface CommandSourceOptions extends KeySourceOptions {
  readonly timeoutMs: number;
  /** @defaultValue Limits.MaxCommandOutputBytes */
  readonly maxOutputBytes?: number;
}

/** The argv as a person would type it (quoted where needed), cut short. */
function describe(argv: readonly string[]): string {
  const text = argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
  return `command ${text.length > 200 ? `${text.slice(0, 200)}…` : text}`;
}

export function createCommandSource(spec: CommandSourceSpec, options: CommandSourceOptions): RawKeySource {
  const description = describe(spec.command);
  return { description, batches: () => commandKeys(spec.command, options, description) };
}

async function* commandKeys(argv: readonly string[], options: CommandSourceOptions, description: string): AsyncGenerator<readonly Key[]> {
  const fail = (message: string, cause?: unknown): never => {
    throw new InvalidRequestError(`key source ${description}: ${message}`, { cause, details: { source: description } });
  };
  const maxOutput = options.maxOutputBytes ?? Limits.MaxCommandOutputBytes;
  const child = spawn(argv[0]!, argv.slice(1), {
    shell: false,
    // Its own process group, so a stop reaches what it started too (`sh -c '…; sleep'` leaves
    // the sleep holding stdout open after sh alone is killed).
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...options.env } as NodeJS.ProcessEnv,
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    // Keep the end: that is where a program says why it stopped.
    stderr = (stderr + chunk).slice(-Limits.MaxCommandStderrExcerpt);
  });
  const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
  /** Kills the program's whole process group, and stops reading from anything that escaped it. */
  const stop = (): void => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
    child.stdout.destroy();
    child.stderr.destroy();
    // A destroyed stream never says 'end', which is what readline waits for.
    lines.close();
  };
  let stopped: 'timeout' | 'output' | undefined;
  let outputBytes = 0;
  child.stdout.on('data', (chunk: Buffer) => {
    outputBytes += chunk.length;
    if (outputBytes > maxOutput && stopped === undefined) {
      stopped = 'output';
      stop();
    }
  });
  const timer = setTimeout(() => {
    stopped ??= 'timeout';
    stop();
  }, options.timeoutMs);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>((resolve) => {
    child.once('error', (error) => resolve({ code: null, signal: null, error }));
    child.once('close', (code, signal) => resolve({ code, signal }));
  });
  let finished = false;
  try {
    let n = 0;
    let batch: Key[] = [];
    for await (const line of lines) {
      n += 1;
      if (stopped !== undefined) break;
      const key = keyFromJsonLine(line, `${description} line ${n}`, options.attributes);
      if (key !== undefined) batch.push(key);
      if (batch.length >= BATCH_KEYS) {
        yield batch;
        batch = [];
      }
    }
    if (batch.length > 0) yield batch;
    const { code, signal, error } = await exited;
    finished = true;
    const tail = stderr.trim() === '' ? '' : `: ${stderr.trim()}`;
    if (error !== undefined) fail(`could not start (${error.message})`, error);
    if (stopped === 'timeout') fail(`timed out after ${options.timeoutMs} ms${tail}`);
    if (stopped === 'output') fail(`printed more than ${maxOutput} bytes${tail}`);
    if (signal !== null) fail(`killed by ${signal}${tail}`);
    if (code !== 0) fail(`exited with code ${code}${tail}`);
  } finally {
    clearTimeout(timer);
    // A consumer that stops early (or a bad line) must not leave the program running.
    if (!finished) {
      stop();
      await exited;
    }
  }
}
