/**
 * The built CLI as a user runs it, `node bin/docket.js <args> --server <url>` (the integration
 * project's globalSetup builds dist/ first), without the developer's NATS settings, its output
 * collected. `--server` goes before a `--`, after which come a command's own arguments
 * (`docket run-direct q -- sh -c ...`). A run that has not ended by the deadline is killed (its
 * code is then null): a command must never wait on a terminal that is not there.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export const REPO_ROOT = join(import.meta.dirname, '..', '..');
const BIN = join(REPO_ROOT, 'bin', 'docket.js');

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  /** `pipe`: stdin is an open pipe that is not a terminal (a prompt must refuse). @defaultValue 'ignore' */
  readonly stdin?: 'ignore' | 'pipe';
  /** @defaultValue 30000 */
  readonly deadlineMs?: number;
  /** Called with the CLI's process once spawned (to signal it, as a user's Ctrl-C would). */
  readonly onSpawn?: (child: ChildProcess) => void;
}

export function runDocket(serverUrl: string, args: readonly string[], options: CliOptions = {}): Promise<CliRun> {
  const env = { ...process.env };
  for (const name of ['NATS_URL', 'DOCKET_LOG_LEVEL', 'DOCKET_LOCAL_NATS_PORT']) delete env[name];
  const end = args.includes('--') ? args.indexOf('--') : args.length;
  const argv = [...args.slice(0, end), '--server', serverUrl, ...args.slice(end)];
  const child = spawn(process.execPath, [BIN, ...argv], { cwd: REPO_ROOT, env, stdio: [options.stdin ?? 'ignore', 'pipe', 'pipe'] });
  options.onSpawn?.(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const deadline = setTimeout(() => child.kill('SIGKILL'), options.deadlineMs ?? 30_000);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(deadline);
      resolve({ code, stdout, stderr });
    });
  });
}
