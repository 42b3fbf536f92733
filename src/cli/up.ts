/**
 * `docket up`: run a docket node in the foreground. It connects to `--server` / NATS_URL; when
 * neither is given and nothing listens on 127.0.0.1:4222 (or `--local-port` /
 * DOCKET_LOCAL_NATS_PORT), it starts nats-server from the repo's nats.conf in the current
 * directory, says so, and stops it on exit. SIGINT/SIGTERM close the node (a checkpoint) and
 * exit 0. Logs go to stderr: readable on a terminal, JSON lines otherwise (or with `--json`).
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { UnavailableError, coerceError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { LocalNats } from './local-nats.js';
import { parseLiveEvents, parseLogLevel, parsePort, readEnvironment } from './options.js';
import { setExitCode } from './session.js';

interface UpFlags {
  readonly server?: string;
  readonly dataDir: string;
  readonly logLevel?: string;
  readonly localPort?: string;
  readonly nodeName?: string;
  readonly liveEvents?: string;
  readonly json?: boolean;
}

/** A node's close writes a checkpoint; past this, exit anyway rather than hang. */
const CLOSE_TIMEOUT_MS = 15_000;

function withTimeout(promise: Promise<unknown>, ms: number): Promise<'done' | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.then(() => 'done' as const),
    new Promise<'timeout'>((done) => {
      timer = setTimeout(() => done('timeout'), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function resolveNats(flags: UpFlags, root: Logger, log: Logger): Promise<{ servers: string; local: LocalNats | undefined }> {
  const env = readEnvironment();
  const given = flags.server ?? env.natsUrl;
  if (given !== undefined) return { servers: given, local: undefined };

  const { NATS_CONF_PORT, isListening, natsServerBinary, startLocalNats } = await import('./local-nats.js');
  const port = flags.localPort !== undefined ? parsePort(flags.localPort, '--local-port') : (env.localNatsPort ?? NATS_CONF_PORT);
  if (await isListening('127.0.0.1', port)) {
    log.info({ port }, 'using the nats-server listening on 127.0.0.1');
    return { servers: `nats://127.0.0.1:${port}`, local: undefined };
  }
  const binary = natsServerBinary(env.natsServerBin);
  log.info({ port, binary }, 'no NATS URL given and nothing listens on 127.0.0.1, starting a local nats-server');
  const local = await startLocalNats({ binary, cwd: process.cwd(), port, log: root.child({ component: 'nats-server' }) });
  log.info({ port: local.port, monitorPort: local.monitorPort, storeDir: local.storeDir, config: local.config, pid: local.pid, gomaxprocs: local.gomaxprocs ?? 'default' }, 'started a local nats-server');
  return { servers: local.url, local };
}

async function upAction(flags: UpFlags): Promise<void> {
  const env = readEnvironment();
  const level = parseLogLevel(flags.logLevel ?? env.logLevel ?? 'info', flags.logLevel === undefined ? 'DOCKET_LOG_LEVEL' : '--log-level');
  const liveEvents = parseLiveEvents(flags.liveEvents ?? env.liveEvents ?? 'commit', flags.liveEvents === undefined ? 'DOCKET_LIVE_EVENTS' : '--live-events');
  const { createLogger } = await import('../logger.js');
  const root = createLogger({ level, pretty: !flags.json && process.stderr.isTTY === true });
  const log = root.child({ component: 'cli' });

  const { servers, local } = await resolveNats(flags, root, log);
  // Listen for signals before the node starts: a SIGTERM that arrives before a listener exists
  // would kill the process at once, without the clean close (checkpoint).
  const stopRequested = new Promise<{ signal: string } | { serverExited: true }>((done) => {
    const onSignal = (signal: NodeJS.Signals) => {
      // A second signal while closing: stop waiting.
      const force = () => {
        log.warn('second signal, exiting without a clean close');
        process.exit(1);
      };
      process.once('SIGINT', force);
      process.once('SIGTERM', force);
      done({ signal });
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    void local?.exited.then(() => done({ serverExited: true }));
  });

  let node: Awaited<ReturnType<typeof import('../node.js').startNode>>;
  try {
    const { startNode } = await import('../node.js');
    node = await startNode({
      servers,
      dataDir: resolve(flags.dataDir),
      logger: root,
      ...(flags.nodeName === undefined ? {} : { nodeName: flags.nodeName }),
      liveEvents,
      ...(env.finishedRetentionMs === undefined ? {} : { finishedRetentionMs: env.finishedRetentionMs }),
    });
  } catch (err) {
    await local?.stop();
    const error = coerceError(err);
    log.error({ err: error }, 'node did not start');
    throw new UnavailableError(`cannot start a docket node on ${servers}: ${error.message}`, { cause: err });
  }

  const reason = await stopRequested;

  if ('signal' in reason) log.info({ signal: reason.signal }, 'shutting down');
  else log.error('the local nats-server exited, shutting down');
  if ((await withTimeout(node.close(), CLOSE_TIMEOUT_MS)) === 'timeout') log.warn({ ms: CLOSE_TIMEOUT_MS }, 'node close timed out');
  if (local) {
    await local.stop();
    log.info('stopped the local nats-server');
  }
  log.info('bye');
  root.flush();
  setExitCode('signal' in reason ? 0 : 1);
}

export function registerUp(program: Command): void {
  program
    .command('up')
    .description('run a docket node (starts a local nats-server when no URL is given and nothing listens)')
    .option('-s, --server <url>', 'NATS server URL (default: $NATS_URL; else 127.0.0.1:4222, started if nothing listens)')
    .option('--data-dir <dir>', 'where checkpoints are written', './.data/docket')
    .option('--log-level <level>', 'trace, debug, info, warn, error (default: $DOCKET_LOG_LEVEL, else info)')
    .option('--local-port <port>', 'probe and start the local nats-server on this port instead of 4222 (or $DOCKET_LOCAL_NATS_PORT)')
    .option('--node-name <name>', "this node's name in event meta and leases (default: kept in <data-dir>/node-id, made on first start)")
    .option('--live-events <mode>', "commit: each commit on docket.live.<partition>; each: also each event on docket.evt.<kind>.<queue>.<id> (default: $DOCKET_LIVE_EVENTS, else commit)")
    .option('--json', 'JSON log lines even on a terminal')
    .action(async (flags: UpFlags) => upAction(flags));
}
