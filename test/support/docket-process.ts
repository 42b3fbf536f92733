/**
 * `docket up` as a real child process, for crash tests: start it, wait for its 'serving' log
 * line, SIGKILL it, start it again on the same stream and data directory.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface DocketProcess {
  readonly child: ChildProcess;
  /** Everything the process wrote to stderr (its JSON log), for a failing test's message. */
  readonly log: () => string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export async function startDocketProcess(options: { server: string; dataDir: string; timeoutMs?: number }): Promise<DocketProcess> {
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'docket.js'), 'up', '--server', options.server, '--data-dir', options.dataDir, '--log-level', process.env['DOCKET_TEST_LOG_LEVEL'] ?? 'info'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`docket up did not serve in time:\n${log}`)), options.timeoutMs ?? 60_000);
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`docket up exited with ${code}:\n${log}`));
    };
    child.once('exit', onExit);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      log += chunk;
      if (log.length > 1_000_000) log = log.slice(-500_000);
      if (/"msg":"serving"/.test(chunk) || /serving/.test(chunk)) {
        clearTimeout(timer);
        child.removeListener('exit', onExit);
        resolve();
      }
    });
  });
  return {
    child,
    log: () => log,
    async kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}
