/**
 * Worker-side commands: `retry`, `move`, and `work <queue> -- <command...>`, which runs a command
 * per job for workers in any language: the job as JSON on stdin and in the environment, exit 0 =
 * success, otherwise the tail of stderr is the error message.
 */
import { spawn } from 'node:child_process';
import type { Command } from 'commander';
import { InvalidRequestError, NonRetryableJobError } from '../errors.js';
import { createLogger } from '../logger.js';
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

async function workAction(queue: string, argv: readonly string[], flags: WorkFlags): Promise<void> {
  if (argv.length === 0) throw new InvalidRequestError('give the command to run after --, e.g. docket work thumbnails -- ./make-thumb.sh');
  const { Worker } = await import('../client/worker.js');
  const env = readEnvironment();
  const logger = createLogger({ level: flags.logLevel ? parseLogLevel(flags.logLevel) : (env.logLevel ?? 'info'), pretty: process.stderr.isTTY === true });
  const noRetryCode = flags.fatalExitCode === undefined ? undefined : parseInteger(flags.fatalExitCode, '--fatal-exit-code');
  const servers = serverFrom(flags.server);
  const worker = new Worker({
    queue,
    ...(servers === undefined ? {} : { servers }),
    concurrency: flags.concurrency === undefined ? 1 : parsePositiveInteger(flags.concurrency, '--concurrency'),
    ...(flags.leaseMs === undefined ? {} : { leaseMs: parsePositiveInteger(flags.leaseMs, '--lease-ms') }),
    logger,
    handleSignals: true,
    handler: (job, ctx) =>
      new Promise((resolve, reject) => {
        const child = spawn(argv[0]!, argv.slice(1), {
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
        const stdout = tailCollector(64 * 1024);
        const stderr = tailCollector(4 * 1024);
        child.stdout.on('data', stdout.push);
        child.stderr.on('data', stderr.push);
        child.stdin.on('error', () => undefined); // a command that does not read stdin
        child.stdin.end(JSON.stringify(job));
        // A cancelled job or a lost lease stops the command.
        ctx.signal.addEventListener('abort', () => child.kill('SIGTERM'), { once: true });
        child.once('error', (err) => reject(new NonRetryableJobError(`cannot run ${argv[0]}: ${err.message}`)));
        child.once('close', (code, signal) => {
          if (code === 0) {
            const out = stdout.text();
            try {
              resolve(out === '' ? null : JSON.parse(out));
            } catch {
              resolve({ stdout: out });
            }
            return;
          }
          const message = stderr.text() || `exited with ${code ?? signal}`;
          reject(code !== null && code === noRetryCode ? new NonRetryableJobError(message) : new Error(message));
        });
      }),
  });
  await worker.start();
  logger.info({ queue, concurrency: flags.concurrency ?? 1 }, 'working');
  // The worker runs until SIGTERM/SIGINT, which drain it and exit (handleSignals).
  await new Promise<never>(() => undefined);
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
