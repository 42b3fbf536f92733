/**
 * Worker-side commands: `retry`, `move`, and `work <queue> -- <command...>`, which runs a command
 * per job for workers in any language: the job as JSON on stdin and in the environment, exit 0 =
 * success, otherwise the tail of stderr is the error message; the exit code is recorded either way.
 * The command is run by src/cli/run-command.ts.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import type { Command } from 'commander';
import { Limits } from '../commands/limits.js';
import { InvalidRequestError } from '../errors.js';
import type { Logger } from '../logger.js';
import { isQueueName, NODE_NAME } from '../nats/subjects.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseInteger, parseLogLevel, parsePositiveInteger, readEnvironment, serverFrom } from './options.js';
import { writeJson, writeOut } from './render.js';
import { onStopSignals, resolveCommand, runCommand, type CommandRun } from './run-command.js';
import { setExitCode, withClient } from './session.js';

/** Between two attempts to reach NATS at start. */
const CONNECT_RETRY_MS = 1_000;

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
  readonly prefetch?: string;
  readonly leaseMs?: string;
  readonly logLevel?: string;
  /** Exit code meaning "fail without retry". */
  readonly fatalExitCode?: string;
  /** The worker's node (fan-out jobs). */
  readonly node?: string;
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
  const prefetch = flags.prefetch === undefined ? undefined : parseInteger(flags.prefetch, '--prefetch');
  // What the Worker would refuse is refused before connecting: with NATS down, the user would
  // otherwise see "waiting for NATS" rather than the mistake.
  if (!isQueueName(queue)) throw new InvalidRequestError(`queue must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(queue)}`);
  if (flags.node !== undefined && !NODE_NAME.test(flags.node)) throw new InvalidRequestError(`--node must be 1-128 characters of [A-Za-z0-9_.:-], got ${JSON.stringify(flags.node)}`);
  if (leaseMs !== undefined && (leaseMs < Limits.MinLeaseMs || leaseMs > Limits.MaxLeaseMs)) {
    throw new InvalidRequestError(`--lease-ms must be ${Limits.MinLeaseMs}..${Limits.MaxLeaseMs}, got ${leaseMs}`);
  }
  if (prefetch !== undefined && (prefetch < 0 || prefetch > Limits.MaxClaimJobs)) throw new InvalidRequestError(`--prefetch must be 0..${Limits.MaxClaimJobs}, got ${prefetch}`);
  const url = serverFrom(flags.server) ?? DEFAULT_NATS_URL;
  const run: CommandRun = { file, args: argv.slice(1), noRetryCode, children: new Set(), stdin: 'job' };
  const log = logger.child({ component: 'work', queue });

  // First signal: stop claiming, let the commands running finish (drain). Second: stop them too.
  const stop = onStopSignals(run, log, 'no more jobs');
  const stopped = stop.requested;

  const startedAt = Date.now();
  const nc = await connectWaiting(url, log, stopped);
  if (nc === undefined) return;
  void watchConnection(nc, url, log);
  const worker = new Worker({
    queue,
    nc,
    concurrency,
    ...(prefetch === undefined ? {} : { prefetch }),
    ...(leaseMs === undefined ? {} : { leaseMs }),
    ...(flags.node === undefined ? {} : { node: flags.node }),
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
    .option('--prefetch <n>', 'jobs claimed ahead while commands take under 10 ms on average (default: --concurrency; 0: none)')
    .option('--lease-ms <n>', 'lease per claim; heartbeats every third (default 30000)')
    .option('--fatal-exit-code <code>', 'this exit code fails the job without a retry')
    .option('--node <name>', "this worker's node: it runs the fan-out jobs' entries for this node (default: the host name)")
    .option('--log-level <level>', 'trace|debug|info|warn|error|fatal|silent')
    .action(async (queue: string, argv: string[], flags: WorkFlags) => workAction(queue, argv, flags));
}
