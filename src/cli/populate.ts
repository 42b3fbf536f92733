/**
 * `docket populate <queue> -- <command...>`: DataJoint's populate (seeds 000 and 001) for a job
 * set. Distributed mode (the default): refresh first when the job set's auto_refresh (or
 * --refresh) says so, then claim and run jobs in priority order with at most --processes at once
 * and --max-calls in all, only priority <= --priority, until a claim finds nothing within reach
 * (pending and due). Direct mode (--direct, seed 001): the keys are source - target computed here,
 * run one at a time with no job, no claim and no record in the log.
 *
 * Each job's command is run as `docket work` runs it (src/cli/run-command.ts), with the key as
 * JSON on stdin. The first SIGINT/SIGTERM stops taking keys and lets the running commands end;
 * a second kills them.
 */
import type { Command } from 'commander';
import { Priority } from '../../machines/index.js';
import type { Client } from '../client/client.js';
import type { WorkerJob, WorkerJobContext } from '../client/worker.js';
import type { RefreshReply } from '../commands/jobset-commands.js';
import { coerceError, InvalidRequestError } from '../errors.js';
import type { Logger } from '../logger.js';
import { parseRestrict } from './jobset-commands.js';
import { parseInteger, parseLogLevel, parsePositiveInteger, readEnvironment } from './options.js';
import { writeErr, writeJson, writeOut } from './render.js';
import { onStopSignals, resolveCommand, runCommand, type CommandRun, type Stop } from './run-command.js';
import { setExitCode, withClient } from './session.js';

interface PopulateFlags {
  readonly server?: string;
  readonly json?: boolean;
  readonly restrict?: string;
  readonly maxCalls?: string;
  readonly processes?: string;
  readonly priority?: string;
  /** --refresh: true, --no-refresh: false, neither: the job set's auto_refresh. */
  readonly refresh?: boolean;
  readonly suppressErrors?: boolean;
  readonly direct?: boolean;
  readonly leaseMs?: string;
  readonly logLevel?: string;
}

/** Exit code of a populate stopped by a signal (the shell's 128 + SIGINT). */
const INTERRUPTED_EXIT_CODE = 130;
/** Failed keys the summary lists by name (the rest are counted; `docket jobs <queue> --status error` has them all). */
const LISTED_ERRORS = 20;

export interface PopulateSummary {
  readonly mode: 'distributed' | 'direct';
  /** The refresh run first, when one was. */
  readonly refreshed: Omit<RefreshReply, 'queue'> | null;
  /** Keys whose command succeeded (and, distributed, whose job recorded it). */
  readonly computed: number;
  /** Keys whose command failed. */
  readonly errors: number;
  /** Distributed: claimed jobs whose run lost its job before it ended (cancelled, removed, lease lost). */
  readonly skipped: number;
  readonly interrupted: boolean;
  /** The first failed keys with their error messages. */
  readonly failures: readonly { readonly key: unknown; readonly message: string }[];
}

interface Bar {
  setTotal(total: number): void;
  increment(delta: number, payload: Record<string, unknown>): void;
  stop(): void;
}

/** pending -> done with errors, rate and ETA, on stderr when it is a terminal; otherwise nothing. */
async function progressBar(total: number): Promise<Bar | undefined> {
  if (!process.stderr.isTTY || total <= 0) return undefined;
  const { default: cliProgress } = await import('cli-progress');
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: 'populating |{bar}| {value}/{total} | {errors} errors | {rate} keys/s | eta {eta_formatted}',
      hideCursor: true,
      etaBuffer: 20,
    },
    cliProgress.Presets.shades_classic,
  );
  const startedAt = Date.now();
  let done = 0;
  bar.start(total, 0, { errors: 0, rate: '0.0' });
  return {
    setTotal: (n) => bar.setTotal(n),
    increment: (delta, payload) => {
      done += delta;
      // Claims can outrun the estimate (jobs added meanwhile): the bar grows rather than overflow.
      if (done > bar.getTotal()) bar.setTotal(done);
      bar.increment(delta, { ...payload, rate: (done / Math.max(0.001, (Date.now() - startedAt) / 1000)).toFixed(1) });
    },
    stop: () => bar.stop(),
  };
}

interface Plan {
  readonly queue: string;
  readonly run: CommandRun;
  readonly restrict: unknown;
  readonly maxCalls: number | undefined;
  readonly processes: number;
  readonly priority: number | undefined;
  readonly leaseMs: number | undefined;
}

function failureOf(key: unknown, err: unknown): { key: unknown; message: string } {
  return { key, message: coerceError(err).message };
}

async function populateDistributed(client: Client, plan: Plan, flags: PopulateFlags, logger: Logger, stop: Stop): Promise<PopulateSummary> {
  const [{ Worker }, { resolvePopulateSettings }] = await Promise.all([import('../client/worker.js'), import('../jobsets/settings.js')]);
  const view = await client.showJobSet(plan.queue, { remaining: false });
  const settings = resolvePopulateSettings({ refresh: flags.refresh, priority: plan.priority }, view.jobset);
  let refreshed: PopulateSummary['refreshed'] = null;
  if (settings.refresh) {
    const { queue: _queue, ...counts } = await client.refresh({ queue: plan.queue, ...(plan.restrict === undefined ? {} : { restrict: plan.restrict }) } as Parameters<Client['refresh']>[0]);
    refreshed = counts;
  }
  const failures: { key: unknown; message: string }[] = [];
  let errors = 0;
  const empty = { mode: 'distributed' as const, refreshed, computed: 0, errors: 0, skipped: 0, failures };
  if (stop.isRequested()) return { ...empty, interrupted: true };
  // The bar's total: the due pending jobs now (an estimate: --priority may leave some out).
  const [progress] = await client.progress(plan.queue);
  const due = Math.max(0, (progress?.pending ?? 0) - (progress?.delayed ?? 0));
  const bar = await progressBar(Math.min(due, plan.maxCalls ?? Infinity));
  const worker = new Worker({
    queue: plan.queue,
    nc: client.nc,
    concurrency: plan.processes,
    untilEmpty: true,
    ...(plan.maxCalls === undefined ? {} : { maxJobs: plan.maxCalls }),
    ...(settings.maxPriority === null ? {} : { maxPriority: settings.maxPriority }),
    ...(plan.leaseMs === undefined ? {} : { leaseMs: plan.leaseMs }),
    ...(view.jobset.version === undefined ? {} : { version: view.jobset.version }),
    logger,
    handler: async (job: WorkerJob, ctx: WorkerJobContext) => {
      try {
        const result = await runCommand(plan.run, job, ctx);
        bar?.increment(1, { errors });
        return result;
      } catch (err) {
        errors += 1;
        if (failures.length < LISTED_ERRORS) failures.push(failureOf(job.key, err));
        bar?.increment(1, { errors });
        throw err;
      }
    },
  });
  await worker.start();
  await Promise.race([worker.idle(), stop.requested]);
  await worker.close();
  bar?.stop();
  return { ...empty, computed: worker.counts.succeeded, errors: worker.counts.failed, skipped: worker.counts.lost, interrupted: stop.isRequested() };
}

/** Seed 001's direct mode: keys = (source & restrict) - target, read here; one command at a time; nothing recorded. */
async function populateDirect(client: Client, plan: Plan, stop: Stop): Promise<PopulateSummary> {
  const [{ readRefreshInputs }, { missingKeys }, { restrictionOf }] = await Promise.all([import('../jobsets/refresh-inputs.js'), import('../jobsets/plan.js'), import('../commands/jobset-commands.js')]);
  const view = await client.showJobSet(plan.queue, { remaining: false });
  const inputs = await readRefreshInputs(view.jobset as unknown as import('../jobsets/refresh-inputs.js').JobSetSources, { env: process.env });
  const keys = missingKeys(inputs.source, inputs.target, restrictionOf(plan.restrict as Parameters<typeof restrictionOf>[0])).slice(0, plan.maxCalls ?? Infinity);
  const failures: { key: unknown; message: string }[] = [];
  let computed = 0;
  let errors = 0;
  const bar = await progressBar(keys.length);
  const never = new AbortController().signal;
  for (const key of keys) {
    if (stop.isRequested()) break;
    // A stand-in for a claimed job: no job, no run (DOCKET_JOB_ID and DOCKET_RUN_ID are empty).
    const job: WorkerJob = { job_id: '', run_id: '', queue: plan.queue, key, params: {}, attempt: 1, max_attempts: 1, lease_ms: 0, fencing_token: 0 };
    const ctx: WorkerJobContext = { runId: '', fencingToken: 0, signal: never, heartbeat: async () => undefined, progress: () => undefined, setExitCode: () => undefined, node: '' };
    try {
      await runCommand(plan.run, job, ctx);
      computed += 1;
    } catch (err) {
      errors += 1;
      if (failures.length < LISTED_ERRORS) failures.push(failureOf(key, err));
    }
    bar?.increment(1, { errors });
  }
  bar?.stop();
  return { mode: 'direct', refreshed: null, computed, errors, skipped: 0, interrupted: stop.isRequested(), failures };
}

function printSummary(queue: string, summary: PopulateSummary): void {
  const r = summary.refreshed;
  if (r !== null) writeOut(`refreshed ${queue}: added ${r.added}, removed ${r.removed}, orphaned ${r.orphaned}, re-pended ${r.re_pended}`);
  writeOut(
    `populate ${queue}${summary.mode === 'direct' ? ' (direct)' : ''}: computed ${summary.computed}, errors ${summary.errors}, skipped ${summary.skipped}${summary.interrupted ? ' (interrupted)' : ''}`,
  );
  for (const f of summary.failures) writeErr(`error ${JSON.stringify(f.key)}: ${f.message.replace(/\s*\n\s*/g, ' ')}`);
  if (summary.errors > summary.failures.length) writeErr(`... and ${summary.errors - summary.failures.length} more: docket jobs ${queue} --status error`);
}

async function populateAction(queue: string, argv: readonly string[], flags: PopulateFlags): Promise<void> {
  if (argv.length === 0) throw new InvalidRequestError('give the command to run after --, e.g. docket populate thumbnails -- ./make-thumb.sh');
  const file = resolveCommand(argv[0]!);
  const maxCalls = flags.maxCalls === undefined ? undefined : parsePositiveInteger(flags.maxCalls, '--max-calls');
  const processes = flags.processes === undefined ? 1 : parsePositiveInteger(flags.processes, '--processes');
  const priority = flags.priority === undefined ? undefined : parseInteger(flags.priority, '--priority');
  if (priority !== undefined && (priority < Priority.Min || priority > Priority.Max)) throw new InvalidRequestError(`--priority must be ${Priority.Min}..${Priority.Max}, got ${priority}`);
  const leaseMs = flags.leaseMs === undefined ? undefined : parsePositiveInteger(flags.leaseMs, '--lease-ms');
  if (flags.direct) {
    // Direct mode has no jobs: nothing to refresh, no priorities, one process (seed 001).
    if (processes !== 1) throw new InvalidRequestError('--direct runs one process: leave out --processes');
    if (priority !== undefined) throw new InvalidRequestError('--direct has no jobs and so no priorities: leave out --priority');
    if (flags.refresh === true) throw new InvalidRequestError('--direct does not use the job set\'s jobs: leave out --refresh');
  }
  const restrict = flags.restrict === undefined ? undefined : parseRestrict(flags.restrict);
  const { createLogger } = await import('../logger.js');
  const env = readEnvironment();
  // warn by default: per-job lines would fight the progress bar.
  const logger = createLogger({ level: flags.logLevel ? parseLogLevel(flags.logLevel) : (env.logLevel ?? 'warn'), pretty: process.stderr.isTTY === true });
  const run: CommandRun = { file, args: argv.slice(1), noRetryCode: undefined, children: new Set(), stdin: 'key' };
  const stop = onStopSignals(run, logger.child({ component: 'populate', queue }));
  const plan: Plan = { queue, run, restrict, maxCalls, processes, priority, leaseMs };
  try {
    const summary = await withClient(flags, (client) => (flags.direct ? populateDirect(client, plan, stop) : populateDistributed(client, plan, flags, logger, stop)));
    if (flags.json) writeJson({ ok: summary.errors === 0 || flags.suppressErrors === true, queue, ...summary });
    else printSummary(queue, summary);
    if (summary.interrupted) setExitCode(INTERRUPTED_EXIT_CODE);
    else setExitCode(summary.errors > 0 && flags.suppressErrors !== true ? 1 : 0);
  } finally {
    stop.dispose();
  }
}

export function registerPopulateCommand(program: Command): void {
  program
    .command('populate')
    .description("DataJoint's populate for a job set: refresh (auto_refresh), then run <command> per due job in priority order until none is left; the key as JSON on stdin and in DOCKET_KEY")
    .argument('<queue>', 'the job set')
    .argument('<command...>', 'the command and its arguments (after --)')
    .option('-s, --server <url>', 'NATS server URL (default: $NATS_URL, else nats://127.0.0.1:4222)')
    .option('--json', 'print the summary as JSON')
    .option('--restrict <json>', 'refresh (direct: compute) only keys matching an object of attribute values, or a JSON array of them (any)')
    .option('--max-calls <n>', 'run at most this many jobs in all')
    .option('--processes <n>', 'commands run at once (default 1)')
    .option('--priority <n>', 'only jobs at this priority or more urgent (0 most urgent)')
    .option('--refresh', "refresh first, whatever the job set's auto_refresh says")
    .option('--no-refresh', "do not refresh first, whatever the job set's auto_refresh says")
    .option('--suppress-errors', 'exit 0 even when a job failed (failures are still recorded and listed)')
    .option('--direct', 'seed 001 direct mode: keys = source - target read here, one at a time, no jobs, nothing recorded')
    .option('--lease-ms <n>', 'lease per claim; heartbeats every third (default 30000)')
    .option('--log-level <level>', 'trace|debug|info|warn|error|fatal|silent (default warn)')
    .action(async (queue: string, argv: string[], flags: PopulateFlags) => populateAction(queue, argv, flags));
}
