/**
 * The job commands: submit, jobs, show, cancel, promote, progress. Each prints a table or line for people
 * and, with `--json`, one JSON document `{ok:true, ...}` with the reply's fields.
 */
import type { Command } from 'commander';
import type { Client, JobDetail } from '../client/client.js';
import { JOB_STATUSES } from '../../machines/index.js';
import { DocketError } from '../errors.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseInteger, parseIsoTime, parseJsonObject, parseKey, parsePositiveInteger } from './options.js';
import { recordTable, table, writeErr, writeJson, writeOut } from './render.js';
import { setExitCode, withClient } from './session.js';

interface SubmitFlags extends CommonFlags {
  readonly params?: string;
  readonly key?: string;
  readonly priority?: string;
  readonly delayMs?: string;
  readonly runAt?: string;
  readonly maxAttempts?: string;
  readonly concurrencyKey?: string;
  readonly dependsOn?: string;
  readonly fanOut?: boolean;
  readonly nodes?: string;
  readonly quorum?: string;
  readonly quorumTimeoutMs?: string;
  readonly id?: string;
  readonly file?: string;
  readonly wait?: boolean;
}

/** The states a job does not leave. */
const ENDED = new Set(['succeeded', 'failed', 'cancelled', 'skipped', 'ignored', 'removed']);
/** `submit --wait` asks for the job this often at first, then doubling up to the maximum. */
const WAIT_POLL_FIRST_MS = 50;
const WAIT_POLL_MAX_MS = 1_000;

/** Asks for the job until it has ended (a retry is a new job: this waits for this one). */
async function waitForEnd(client: Client, jobId: string): Promise<JobDetail> {
  for (let delayMs = WAIT_POLL_FIRST_MS; ; delayMs = Math.min(WAIT_POLL_MAX_MS, delayMs * 2)) {
    const detail = await client.get(jobId);
    if (ENDED.has(detail.job.status)) return detail;
    await new Promise((resolve) => setTimeout(resolve, delayMs));
  }
}

/** The outcome line of `submit --wait`: the result on success, else the error and exit code. */
function outcomeLine(detail: JobDetail): string {
  const { job, run } = detail;
  const fields = (run ?? {}) as { result?: unknown; error?: { message?: string } | null; exit_code?: number | null; failure_reason?: string | null };
  if (job.status === 'succeeded') return `job ${job.job_id} succeeded: ${JSON.stringify(fields.result ?? null)}`;
  const why = fields.error?.message ?? fields.failure_reason ?? job.end_reason ?? job.status;
  const exit = fields.exit_code === null || fields.exit_code === undefined ? '' : ` (exit code ${fields.exit_code})`;
  return `job ${job.job_id} ${job.status}: ${String(why).replace(/\s*\n\s*/g, ' ')}${exit}`;
}

/** The job spec fields given by flags (the queue comes from the argument). */
function specFromFlags(flags: SubmitFlags): Record<string, unknown> {
  const spec: Record<string, unknown> = {};
  if (flags.params !== undefined) spec['params'] = parseJsonObject(flags.params, '--params');
  if (flags.key !== undefined) spec['key'] = parseKey(flags.key);
  if (flags.priority !== undefined) spec['priority'] = parseInteger(flags.priority, '--priority');
  if (flags.delayMs !== undefined) spec['delay_ms'] = parseInteger(flags.delayMs, '--delay-ms');
  if (flags.runAt !== undefined) spec['run_at'] = parseIsoTime(flags.runAt, '--run-at');
  if (flags.maxAttempts !== undefined) spec['max_attempts'] = parseInteger(flags.maxAttempts, '--max-attempts');
  if (flags.concurrencyKey !== undefined) spec['concurrency_key'] = flags.concurrencyKey;
  if (flags.dependsOn !== undefined) spec['depends_on'] = flags.dependsOn.split(',').filter((id) => id !== '');
  if (flags.fanOut || flags.nodes !== undefined || flags.quorum !== undefined || flags.quorumTimeoutMs !== undefined) {
    spec['fan_out'] = {
      ...(flags.nodes === undefined ? {} : { nodes: flags.nodes.split(',').filter((node) => node !== '') }),
      ...(flags.quorum === undefined ? {} : { quorum: parseInteger(flags.quorum, '--quorum') }),
      ...(flags.quorumTimeoutMs === undefined ? {} : { quorum_timeout_ms: parseInteger(flags.quorumTimeoutMs, '--quorum-timeout-ms') }),
    };
  }
  return spec;
}

async function submitAction(queue: string, flags: SubmitFlags): Promise<number> {
  const spec = { queue, ...specFromFlags(flags) };
  if (flags.file !== undefined) {
    if (flags.key !== undefined) throw new DocketError('invalid_request', '--key names one job; give keys per line in --file');
    if (flags.params !== undefined) throw new DocketError('invalid_request', '--params is one job\'s params; give params per line in --file');
    if (flags.wait) throw new DocketError('invalid_request', '--wait follows one job; it cannot be used with --file');
    const file = flags.file;
    const { submitFile } = await import('./submit-file.js');
    const summary = await withClient(flags, (client) => submitFile(client, file, spec, flags.id));
    const ok = summary.failed === 0;
    if (flags.json) {
      const firstError = summary.failures[0]?.error;
      writeJson(
        ok
          ? { ok, ...summary }
          : { ok, error: { code: firstError?.code ?? 'unavailable', message: `${summary.failed} of ${summary.total} jobs were refused` }, ...summary },
      );
    } else {
      writeOut(`submitted ${summary.total} jobs: ${summary.created} created, ${summary.existing} already live, ${summary.failed} refused`);
      for (const { line, error } of summary.failures.slice(0, 20)) writeErr(`line ${line}: error ${error.code}: ${error.message.replace(/\s*\n\s*/g, ' ')}`);
      if (summary.failures.length > 20) writeErr(`... and ${summary.failures.length - 20} more`);
    }
    return ok ? 0 : 1;
  }
  return withClient(flags, async (client) => {
    const result = await client.submit({ ...spec, ...(flags.id === undefined ? {} : { id: flags.id }) } as Parameters<typeof client.submit>[0]);
    if (!flags.wait) {
      if (flags.json) writeJson({ ok: true, ...result });
      else writeOut(result.created ? `created job ${result.job_id} (${result.status})` : `job ${result.job_id} is already live for this key (${result.status}); nothing submitted`);
      return 0;
    }
    if (!flags.json) writeErr(result.created ? `created job ${result.job_id} (${result.status}); waiting for it to end` : `job ${result.job_id} is already live for this key (${result.status}); waiting for it to end`);
    const detail = await waitForEnd(client, result.job_id);
    const succeeded = detail.job.status === 'succeeded';
    if (flags.json) writeJson({ ok: succeeded, job_id: result.job_id, created: result.created, status: detail.job.status, run: detail.run });
    else writeOut(outcomeLine(detail));
    return succeeded ? 0 : 1;
  });
}

interface JobsFlags extends CommonFlags {
  readonly status?: string;
  readonly limit?: string;
  readonly cursor?: string;
}

/** Seed 000's status names, as `docket jobs --status` takes them beside docket's own. */
const DATAJOINT_STATUSES: Readonly<Record<string, string>> = { pending: 'queued', reserved: 'running', success: 'succeeded', error: 'failed', ignore: 'ignored' };
/** An error message in the jobs table: its first line, this long at most (`docket show <job_id>` has the whole record). */
const ERROR_CELL_CHARS = 200;

function errorCell(message: string | undefined): string {
  const line = (message ?? '').replace(/\s*\n\s*/g, ' ').trim();
  return line.length > ERROR_CELL_CHARS ? `${line.slice(0, ERROR_CELL_CHARS - 3)}...` : line;
}

async function jobsAction(queue: string, flags: JobsFlags): Promise<number> {
  const status = flags.status === undefined ? undefined : (DATAJOINT_STATUSES[flags.status] ?? flags.status);
  const query = {
    queue,
    ...(status === undefined ? {} : { status }),
    ...(flags.limit === undefined ? {} : { limit: parsePositiveInteger(flags.limit, '--limit') }),
    ...(flags.cursor === undefined ? {} : { cursor: flags.cursor }),
  };
  const { page, known } = await withClient(flags, async (client) => {
    const page = await client.list(query);
    // An empty first page may be a queue the node never saw (a typo): ask, to say which.
    const known = page.jobs.length > 0 || flags.cursor !== undefined || flags.json ? true : await queueKnown(client, queue);
    return { page, known };
  });
  if (flags.json) {
    writeJson({ ok: true, ...page });
    return 0;
  }
  if (!known) writeOut(noQueueLine(queue));
  else if (page.jobs.length === 0) writeOut(`no jobs in ${queue}${flags.status === undefined ? '' : ` with status ${flags.status}`}`);
  else if (status === 'failed') {
    // Seed 000's jobs.errors: the keys with their error messages.
    writeOut(table(['job_id', 'key', 'attempt', 'finished_at', 'error_message'], page.jobs.map((j) => [j.job_id, j.key, `${j.attempt}/${j.max_attempts}`, j.finished_at, errorCell(j.error_message)])));
  } else {
    writeOut(
      table(
        ['job_id', 'status', 'priority', 'key', 'attempt', 'run_at', 'created_at', 'finished_at'],
        page.jobs.map((j) => [j.job_id, j.status, j.priority, j.key, `${j.attempt}/${j.max_attempts}`, j.run_at, j.created_at, j.finished_at]),
      ),
    );
  }
  if (page.next_cursor !== null) writeOut(`more: docket jobs ${queue} --cursor ${page.next_cursor}`);
  return 0;
}

async function showAction(jobId: string, flags: CommonFlags): Promise<number> {
  const detail = await withClient(flags, (client) => client.get(jobId));
  if (flags.json) {
    writeJson({ ok: true, ...detail });
    return 0;
  }
  const { job, run, history } = detail;
  writeOut(
    recordTable([
      ['job_id', job.job_id],
      ['queue', job.queue],
      ['status', job.status],
      ['key', job.key],
      ['params', job.params],
      ['priority', job.priority],
      ['run_at', job.run_at],
      ['attempt', `${job.attempt}/${job.max_attempts}`],
      ['retry_of', job.retry_of],
      ['created_at', job.created_at],
      ['finished_at', job.finished_at],
      ['end_reason', job.end_reason],
    ]),
  );
  if (run === null) writeOut('run: none yet');
  else writeOut(recordTable(Object.entries(run as Record<string, unknown>).map(([k, v]) => [k === 'status' ? 'run status' : k, v] as const)));
  if (detail.fan_out !== undefined) {
    writeOut(`fan-out: quorum ${detail.fan_out.quorum} of ${detail.fan_out.nodes.length} nodes`);
    writeOut(table(['node', 'status', 'attempt', 'run_id', 'finished_at', 'reason'], detail.fan_out.nodes.map((n) => [n.node, n.status, `${n.attempt}/${n.max_attempts}`, n.run_id, n.finished_at, n.error?.message ?? n.reason])));
  }
  writeOut(table(['seq', 'time', 'event', 'event_id'], history.map((h) => [h.seq, h.time, h.type, h.id])));
  return 0;
}

interface CancelFlags extends CommonFlags {
  readonly reason?: string;
  readonly id?: string;
}

async function cancelAction(jobId: string, flags: CancelFlags): Promise<number> {
  const options = { ...(flags.reason === undefined ? {} : { reason: flags.reason }), ...(flags.id === undefined ? {} : { id: flags.id }) };
  const result = await withClient(flags, (client) => client.cancel(jobId, options));
  if (flags.json) writeJson({ ok: true, ...result });
  else writeOut(`job ${result.job_id} ${result.status}`);
  return 0;
}

interface PromoteFlags extends CommonFlags {
  readonly id?: string;
}

async function promoteAction(jobId: string, flags: PromoteFlags): Promise<number> {
  const result = await withClient(flags, (client) => client.promote(jobId, flags.id === undefined ? {} : { id: flags.id }));
  if (flags.json) writeJson({ ok: true, ...result });
  else writeOut(`job ${result.job_id} ${result.status}, due from ${result.run_at}`);
  return 0;
}

const STATES = JOB_STATUSES;

/**
 * Whether the node has seen a job in the queue. Progress answers a queue it never saw with zeros
 * (`docket.cmd.progress` keeps that for scripts); a queue that has had a job has `total > 0`, or
 * `removed > 0` when all its jobs were removed (`docket clean`).
 */
async function queueKnown(client: Client, queue: string): Promise<boolean> {
  const [progress] = await client.progress(queue);
  return progress !== undefined && (progress.total > 0 || (progress.removed ?? 0) > 0);
}

function noQueueLine(queue: string): string {
  return `no queue ${queue}: no job was ever submitted to it`;
}

/** Seed 000's `jobs.progress()` with `remaining`, when `queue` is a job set (`docket jobset show` computes it); null otherwise. */
async function jobSetProgress(client: Client, queue: string): Promise<JobSetProgress | null> {
  try {
    const view = await client.showJobSet(queue);
    const p = view.progress;
    // docket's cancelled counts as DataJoint's error, as in `docket jobset show`.
    return { pending: p.pending, reserved: p.reserved, success: p.success, error: p.error + p.cancelled, ignore: p.ignore, total: p.total, remaining: view.remaining, ...(view.remaining_error === undefined ? {} : { remaining_error: view.remaining_error }) };
  } catch (err) {
    if (err instanceof DocketError && err.code === 'invalid_request') return null;
    throw err;
  }
}

interface JobSetProgress {
  readonly pending: number;
  readonly reserved: number;
  readonly success: number;
  readonly error: number;
  readonly ignore: number;
  readonly total: number;
  /** Keys in the source not yet in the target; null when a source could not be read. */
  readonly remaining: number | null;
  readonly remaining_error?: string;
}

async function progressAction(queue: string | undefined, flags: CommonFlags): Promise<number> {
  const { queues, jobset } = await withClient(flags, async (client) => ({ queues: await client.progress(queue), jobset: queue === undefined ? null : await jobSetProgress(client, queue) }));
  if (flags.json) {
    writeJson({ ok: true, queues, ...(jobset === null ? {} : { jobset }) });
    return 0;
  }
  if (jobset !== null) {
    writeOut(`job set ${queue} (seed 000's view; remaining = source keys not in the target):`);
    writeOut(
      table(
        ['pending', 'reserved', 'success', 'error', 'ignore', 'total', 'remaining'],
        [[jobset.pending, jobset.reserved, jobset.success, jobset.error, jobset.ignore, jobset.total, jobset.remaining ?? `unknown: ${jobset.remaining_error ?? 'not read'}`]],
      ),
    );
  }
  if (queue !== undefined && queues.every((q) => q.total === 0 && (q.removed ?? 0) === 0)) {
    if (jobset === null) writeOut(noQueueLine(queue));
    return 0;
  }
  if (queues.length === 0) {
    writeOut('no queues yet');
    return 0;
  }
  writeOut(
    table(
      ['queue', 'pending', 'delayed', 'reserved', 'success', 'error', 'ignore', 'cancelled', 'total'],
      queues.map((q) => [q.queue, q.pending, q.delayed ?? 0, q.reserved, q.success, q.error, q.ignore, q.cancelled, q.total]),
    ),
  );
  writeOut(table(['queue', ...STATES], queues.map((q) => [q.queue, ...STATES.map((s) => q.counts[s])])));
  // Flow control, for the queues something holds: what, and how many ready jobs wait on it.
  const held = queues.filter((q) => q.flow && ((q.flow['held'] ?? null) !== null || Object.keys((q.flow['waiting_by_reason'] as object | undefined) ?? {}).length > 0));
  if (held.length > 0) {
    writeOut(
      table(
        ['queue', 'held by', 'waiting by reason'],
        held.map((q) => {
          const hold = q.flow!['held'] as { reason: string; detail: string } | null;
          const waiting = Object.entries((q.flow!['waiting_by_reason'] as Record<string, number>) ?? {}).map(([reason, n]) => `${reason} ${n}`).join(', ');
          return [q.queue, hold ? hold.detail : '-', waiting || '-'];
        }),
      ),
    );
  }
  return 0;
}

export function registerJobCommands(program: Command): void {
  withCommonOptions(
    program
      .command('submit')
      .description('submit one job, or a file of jobs (JSON lines)')
      .argument('<queue>', 'queue name ([A-Za-z0-9_-]{1,64})')
      .option('--params <json>', 'job params, a JSON object')
      .option('--key <key>', 'readable key: a JSON object or a string; at most one live job per key')
      .option('--priority <n>', '0..255, lower runs first (default 5)')
      .option('--delay-ms <n>', 'run no earlier than this many ms from now')
      .option('--run-at <iso>', 'run no earlier than this ISO-8601 time')
      .option('--max-attempts <n>', 'attempts before the job stays failed (default 1)')
      .option('--concurrency-key <key>', "flow control: the queue's key_concurrency and key_rate hold per key (a tenant id, say)")
      .option('--depends-on <ids>', 'comma-separated job ids (any queue): the job runs once all of them succeeded')
      .option('--fan-out', "run the job once on each worker node live on the queue (README \"Fan-out jobs\")")
      .option('--nodes <names>', 'fan out to these worker nodes (comma-separated; implies --fan-out)')
      .option('--quorum <n>', 'nodes that must complete for the job to succeed (default: a majority)')
      .option('--quorum-timeout-ms <n>', 'nodes not ended this long after the first node completed are skipped (default 10000)')
      .option('--id <command-id>', 'command id: resending the same id returns the first result')
      .option('--file <path>', "JSON lines, one job spec per line ('-' for stdin); sent in batches of up to 10,000 jobs and 3/4 of the server's max_payload")
      .option('--wait', 'wait for the job to end and print its result; exit 0 only when it succeeded'),
  ).action(async (queue: string, flags: SubmitFlags) => setExitCode(await submitAction(queue, flags)));

  withCommonOptions(
    program
      .command('jobs')
      .description("list a queue's jobs in submission order")
      .argument('<queue>', 'queue name')
      .option(
        '--status <status>',
        'only jobs in this state (waiting, queued, running, succeeded, failed, cancelled, skipped, ignored), or delayed: queued with run_at not yet come (queued includes them); DataJoint\'s pending, reserved, success, error (keys with their error messages), ignore too',
      )
      .option('--limit <n>', 'page size (default 100, at most 1000)')
      .option('--cursor <cursor>', 'continue after the page that returned this cursor'),
  ).action(async (queue: string, flags: JobsFlags) => setExitCode(await jobsAction(queue, flags)));

  withCommonOptions(
    program.command('show').description('one job: its fields, its run and its history').argument('<job_id>', 'job id'),
  ).action(async (jobId: string, flags: CommonFlags) => setExitCode(await showAction(jobId, flags)));

  withCommonOptions(
    program
      .command('cancel')
      .description('cancel a waiting, queued or running job')
      .argument('<job_id>', 'job id')
      .option('--reason <text>', 'why, recorded on the event')
      .option('--id <command-id>', 'command id: resending the same id returns the first result'),
  ).action(async (jobId: string, flags: CancelFlags) => setExitCode(await cancelAction(jobId, flags)));

  withCommonOptions(
    program
      .command('promote')
      .description('make a delayed job due now (it keeps its place in the queue order)')
      .argument('<job_id>', 'job id')
      .option('--id <command-id>', 'command id: resending the same id returns the first result'),
  ).action(async (jobId: string, flags: PromoteFlags) => setExitCode(await promoteAction(jobId, flags)));

  withCommonOptions(
    program
      .command('progress')
      .description('per queue: pending (of which delayed)/reserved/success/error/ignore/cancelled/total (DataJoint, cancelled apart) and counts per state; for a job set also seed 000\'s view with remaining')
      .argument('[queue]', 'one queue (default: all)'),
  ).action(async (queue: string | undefined, flags: CommonFlags) => setExitCode(await progressAction(queue, flags)));
}
