/**
 * A disposable nats-server for one test file: an ephemeral port, a temp store directory,
 * JetStream on. Modelled on nats.js's `nst`. Never touches the machine's NATS on 4222.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestNatsServer {
  readonly url: string;
  readonly port: number;
  readonly monitorPort: number;
  readonly storeDir: string;
  readonly process: ChildProcess;
  stop(options?: { keepStore?: boolean }): Promise<void>;
  /** SIGKILL the server (a crash) and start a new one on the same port and store. */
  restart(): Promise<TestNatsServer>;
  [Symbol.asyncDispose](): Promise<void>;
}

export function natsServerBinary(): string {
  if (process.env['NATS_SERVER_BIN']) return process.env['NATS_SERVER_BIN'];
  for (const candidate of ['/usr/sbin/nats-server', '/usr/local/bin/nats-server', '/usr/bin/nats-server']) {
    if (existsSync(candidate)) return candidate;
  }
  return 'nats-server';
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) if (child.pid) try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ }
});

export interface NatsServerOptions {
  readonly port?: number;
  readonly storeDir?: string;
  /** The server's max payload in bytes (a config file; nats-server has no flag for it). @defaultValue 1 MiB */
  readonly maxPayload?: number;
  /** More lines of the server's config file (users and their permissions, say). */
  readonly config?: string;
}

export async function startNatsServer(options: NatsServerOptions = {}): Promise<TestNatsServer> {
  const storeDir = options.storeDir ?? mkdtempSync(join(tmpdir(), 'docket-nats-'));
  const args = ['-js', '-sd', storeDir, '-a', '127.0.0.1', '-p', String(options.port ?? -1), '-m', '-1'];
  if (options.maxPayload !== undefined || options.config !== undefined) {
    const config = join(storeDir, 'test.conf');
    writeFileSync(config, `${options.maxPayload === undefined ? '' : `max_payload: ${options.maxPayload}\n`}${options.config ?? ''}\n`);
    args.unshift('-c', config);
  }
  const child = spawn(natsServerBinary(), args, { stdio: ['ignore', 'ignore', 'pipe'] });
  live.add(child);
  const { port, monitorPort } = await new Promise<{ port: number; monitorPort: number }>((resolve, reject) => {
    let buffer = '';
    let port = 0;
    let monitorPort = 0;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`nats-server did not start in 10 s:\n${buffer}`));
    }, 10_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot start nats-server (${natsServerBinary()}): ${err.message}; install it or set NATS_SERVER_BIN`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited with ${code}:\n${buffer}`));
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      if (port && monitorPort && buffer.includes('Server is ready')) return; // keep draining
      buffer += chunk;
      const client = /Listening for client connections on [\d.]+:(\d+)/.exec(buffer);
      const monitor = /Starting http monitor on [\d.]+:(\d+)/.exec(buffer);
      if (client) port = Number(client[1]);
      if (monitor) monitorPort = Number(monitor[1]);
      if (port && monitorPort && buffer.includes('Server is ready')) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve({ port, monitorPort });
      }
    });
  });
  // JetStream may lag the client listener; wait until it reports healthy.
  for (let i = 0; i < 100; i++) {
    try {
      const res = await fetch(`http://127.0.0.1:${monitorPort}/healthz?js-enabled-only=true`);
      if (res.ok) break;
    } catch {
      /* not yet */
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const server: TestNatsServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    monitorPort,
    storeDir,
    process: child,
    async stop({ keepStore = false } = {}) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      live.delete(child);
      if (!keepStore) rmSync(storeDir, { recursive: true, force: true });
    },
    async restart() {
      child.kill('SIGKILL');
      await exited;
      live.delete(child);
      return startNatsServer({ port, storeDir, ...(options.maxPayload === undefined ? {} : { maxPayload: options.maxPayload }) });
    },
    [Symbol.asyncDispose]() {
      return server.stop();
    },
  };
  return server;
}
