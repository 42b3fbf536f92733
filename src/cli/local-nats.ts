/**
 * The nats-server `docket up` starts when no NATS URL was given and nothing listens: the repo's
 * nats.conf, run from the current directory (so its store is ./.data/nats there). Ready when it
 * logs `Server is ready` and its monitor reports JetStream healthy; stopped with SIGTERM (SIGKILL
 * after a grace period), and killed by pid if docket exits without stopping it.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createConnection } from 'node:net';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { UnavailableError } from '../errors.js';
import type { Logger } from '../logger.js';
import { packageFile } from './package-files.js';

/** The config `docket up` starts nats-server with. */
export const NATS_CONF = packageFile('nats.conf') ?? 'nats.conf';
/** The port nats.conf listens on; another port is given on the command line. */
export const NATS_CONF_PORT = 4222;
/** Start-up of a local nats-server takes 0.1-0.3 s here; more means something is wrong. */
const READY_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 5_000;
const PROBE_TIMEOUT_MS = 1_000;

/** At most this many cores, a local server runs one Go thread (serverThreads). */
export const SMALL_MACHINE_CORES = 2;

/**
 * GOMAXPROCS for a local nats-server: the user's (if not empty), else 1 on a machine of two cores or fewer,
 * else Go's default (a thread per core). A local server shares its cores with the node and its
 * workers; on two, Go's threads handing goroutines to each other woke each other ~30 times a job
 * at concurrency 1 and kept the node waiting for a core. One thread, measured on such a machine
 * (README "Set up, run, test"): the server's CPU a job 746-795 µs → 486-575, the node's time
 * waiting for a core 151-180 µs a job → 45-75.
 */
export function serverThreads(cores: number, env: NodeJS.ProcessEnv): string | undefined {
  // Go reads an empty GOMAXPROCS as unset.
  if (env['GOMAXPROCS'] !== undefined && env['GOMAXPROCS'] !== '') return env['GOMAXPROCS'];
  return cores <= SMALL_MACHINE_CORES ? '1' : undefined;
}

export function natsServerBinary(override: string | undefined): string {
  if (override) return override;
  for (const candidate of ['/usr/sbin/nats-server', '/usr/local/sbin/nats-server', '/usr/local/bin/nats-server', '/usr/bin/nats-server']) {
    if (existsSync(candidate)) return candidate;
  }
  return 'nats-server';
}

/** Whether something accepts TCP connections at host:port. */
export function isListening(host: string, port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = createConnection({ host, port });
    const finish = (listening: boolean) => {
      socket.destroy();
      done(listening);
    };
    socket.setTimeout(PROBE_TIMEOUT_MS, () => finish(false));
    socket.once('connect', () => finish(true));
    socket.once('error', () => finish(false));
  });
}

export interface LocalNats {
  readonly url: string;
  readonly port: number;
  readonly monitorPort: number;
  /** The JetStream store directory, absolute. */
  readonly storeDir: string;
  readonly config: string;
  readonly pid: number;
  /** The GOMAXPROCS it runs with (serverThreads); undefined for Go's default. */
  readonly gomaxprocs: string | undefined;
  /** Settles when the server exits, for whatever reason. */
  readonly exited: Promise<void>;
  stop(): Promise<void>;
}

export interface LocalNatsOptions {
  readonly binary: string;
  /** Directory the server runs in; nats.conf's store path is relative to it. */
  readonly cwd: string;
  /** Listen here instead of nats.conf's port (the monitor then takes a random port). */
  readonly port?: number;
  readonly log: Logger;
}

export async function startLocalNats(options: LocalNatsOptions): Promise<LocalNats> {
  const args = ['-c', NATS_CONF];
  if (options.port !== undefined && options.port !== NATS_CONF_PORT) args.push('-p', String(options.port), '-m', '-1');
  // Its own process group: a Ctrl-C on the terminal reaches docket only, which stops the node
  // (checkpoint) before it stops the server.
  const gomaxprocs = serverThreads(availableParallelism(), process.env);
  const env = gomaxprocs === undefined ? process.env : { ...process.env, GOMAXPROCS: gomaxprocs };
  const child = spawn(options.binary, args, { cwd: options.cwd, env, stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  const killOnExit = () => {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, 'SIGTERM');
      } catch {
        /* already gone */
      }
    }
  };
  process.once('exit', killOnExit);
  const exited = new Promise<void>((done) => child.once('exit', () => done()));

  let buffer = '';
  const ready = await new Promise<{ port: number; monitorPort: number; storeDir: string }>((resolveReady, reject) => {
    const cleanup = () => {
      clearTimeout(timer);
      child.off('error', onError);
      child.off('exit', onExit);
      child.stderr!.off('data', onData);
    };
    const fail = (message: string) => {
      cleanup();
      killOnExit();
      reject(new UnavailableError(message));
    };
    const onError = (err: Error) =>
      fail(`cannot start nats-server (${options.binary}): ${err.message}; install it (apt-get install nats-server) or set NATS_SERVER_BIN`);
    const onExit = (code: number | null, signal: string | null) =>
      fail(`nats-server exited (${code ?? signal}) while starting:\n${buffer.slice(-2000)}`);
    const onData = (chunk: string) => {
      buffer += chunk;
      if (!buffer.includes('Server is ready')) return;
      const client = /Listening for client connections on [\d.]+:(\d+)/.exec(buffer);
      const monitor = /Starting http monitor on [\d.]+:(\d+)/.exec(buffer);
      const store = /Store Directory:\s+"([^"]+)"/.exec(buffer);
      cleanup();
      resolveReady({
        port: Number(client?.[1] ?? options.port ?? NATS_CONF_PORT),
        monitorPort: Number(monitor?.[1] ?? 0),
        storeDir: resolve(options.cwd, store?.[1] ?? '.'),
      });
    };
    const timer = setTimeout(() => fail(`nats-server did not start in ${READY_TIMEOUT_MS / 1000} s:\n${buffer.slice(-2000)}`), READY_TIMEOUT_MS);
    child.once('error', onError);
    child.once('exit', onExit);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', onData);
  });

  // Keep draining its log: warnings and errors are worth a line of ours, the rest is debug.
  let pending = '';
  child.stderr!.on('data', (chunk: string) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const text = line.replace(/^\[\d+\] \S+ \S+ /, '');
      if (/^\[(ERR|FTL)\]/.test(text)) options.log.error({ line: text }, 'nats-server error');
      else if (/^\[WRN\]/.test(text)) options.log.warn({ line: text }, 'nats-server warning');
      else options.log.debug({ line: text }, 'nats-server');
    }
  });

  // JetStream can lag the client listener; wait until the monitor reports it healthy.
  if (ready.monitorPort > 0) {
    for (let i = 0; i < 100; i++) {
      try {
        const res = await fetch(`http://127.0.0.1:${ready.monitorPort}/healthz?js-enabled-only=true`);
        if (res.ok) break;
      } catch {
        /* not yet */
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  return {
    url: `nats://127.0.0.1:${ready.port}`,
    port: ready.port,
    monitorPort: ready.monitorPort,
    storeDir: ready.storeDir,
    config: NATS_CONF,
    pid: child.pid!,
    gomaxprocs,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
        await exited;
        clearTimeout(timer);
      }
      process.off('exit', killOnExit);
    },
  };
}
