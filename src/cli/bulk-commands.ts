/**
 * Bulk actions on a queue: `docket retry-all`, `docket cancel-all`, `docket clean`. Each first
 * asks the node for the count (a dry run, nothing appended), says it, and asks for confirmation
 * on a terminal; `--yes` skips the question, and without a terminal and without `--yes` the
 * command refuses (a script must say it means it). `--dry-run` stops after the count.
 */
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import type { Client } from '../client/client.js';
import type { BulkReply } from '../commands/bulk-commands.js';
import { InvalidRequestError } from '../errors.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseIsoTime } from './options.js';
import { writeErr, writeJson, writeOut } from './render.js';
import { setExitCode, withClient } from './session.js';

interface BulkFlags extends CommonFlags {
  readonly yes?: boolean;
  readonly dryRun?: boolean;
}

const UNITS_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * A duration: a number and a unit (`500ms`, `90s`, `30m`, `12h`, `7d`, `2w`), or parts of them
 * (`1h30m`); a bare number is milliseconds.
 */
export function parseDuration(value: string, name: string): number {
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const parts = [...v.matchAll(/(\d+)(ms|s|m|h|d|w)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== v) {
    throw new InvalidRequestError(`${name} must be a duration such as 500ms, 90s, 30m, 12h, 7d or 1h30m, got ${JSON.stringify(value)}`);
  }
  const ms = parts.reduce((sum, p) => sum + Number(p[1]) * UNITS_MS[p[2]!]!, 0);
  if (!Number.isSafeInteger(ms)) throw new InvalidRequestError(`${name} is too long: ${JSON.stringify(value)}`);
  return ms;
}

/** `--since`: an ISO-8601 time, or a duration meaning that long ago (by this machine's clock). */
export function parseSince(value: string, nowMs: number = Date.now()): string {
  const v = value.trim();
  if (/^\d{4}-\d{2}-\d{2}/.test(v)) return parseIsoTime(v, '--since');
  return new Date(nowMs - parseDuration(v, '--since')).toISOString();
}

export interface ConfirmIo {
  readonly input: NodeJS.ReadableStream;
  readonly output: NodeJS.WritableStream;
  /** Whether both ends are a terminal a person answers at. */
  readonly interactive: boolean;
}

const processIo = (): ConfirmIo => ({ input: process.stdin, output: process.stderr, interactive: process.stdin.isTTY === true && process.stderr.isTTY === true });

/**
 * Asks `question` and reads one line: true for y or yes. Without a terminal it refuses with a
 * message naming `--yes`, rather than wait on a pipe nobody writes to.
 */
export async function confirm(question: string, io: ConfirmIo = processIo()): Promise<boolean> {
  if (!io.interactive) throw new InvalidRequestError(`not a terminal, so nobody can confirm: ${question.replace(/\?$/, '')}. Pass --yes to do it without asking (or --dry-run to only count).`);
  const rl = createInterface({ input: io.input, output: io.output, terminal: false });
  try {
    const answer = await new Promise<string>((resolve) => {
      rl.once('close', () => resolve(''));
      rl.question(`${question} [y/N] `, resolve);
    });
    return /^\s*y(es)?\s*$/i.test(answer);
  } finally {
    rl.close();
  }
}

interface BulkAction {
  readonly verb: 'retry_all' | 'cancel_all' | 'clean';
  readonly queue: string;
  readonly body: Record<string, unknown>;
  /** "retry 12 failed jobs of queue q" for a count. */
  describe(count: number): string;
  /** "retried 12 failed jobs of queue q" for a count. */
  done(count: number): string;
  /** "no failed job of queue q to retry". */
  readonly nothing: string;
}

/** "1 failed job", "12 failed jobs". */
function jobs(count: number, what = ''): string {
  const noun = what === '' ? 'job' : `${what} job`;
  return count === 1 ? `1 ${noun}` : `${count} ${noun}s`;
}

/** Count (dry run), confirm, act; one JSON document with --json. Returns the exit code. */
async function runBulkAction(action: BulkAction, flags: BulkFlags, io?: ConfirmIo): Promise<number> {
  return withClient(flags, async (client: Client) => {
    const body = { queue: action.queue, ...action.body };
    const preview = await client.request<BulkReply>(action.verb, { ...body, dry_run: true });
    if (flags.dryRun || preview.count === 0) {
      if (flags.json) writeJson({ ...preview, ok: true, dry_run: true });
      else writeOut(preview.count === 0 ? `nothing to do: ${action.nothing}` : `would ${action.describe(preview.count)} (dry run: nothing changed)`);
      return 0;
    }
    if (!flags.yes) {
      const question = `${action.describe(preview.count).replace(/^./, (c) => c.toUpperCase())}?`;
      if (!(await confirm(question, io))) {
        if (flags.json) writeJson({ ok: false, error: { code: 'invalid_request', message: 'not confirmed: nothing changed' } });
        else writeErr('not confirmed: nothing changed');
        return 1;
      }
    }
    const result = await client.request<BulkReply>(action.verb, body);
    if (flags.json) writeJson({ ...result, ok: result.failed === undefined });
    else {
      writeOut(action.done(result.count));
      if (result.failed !== undefined) writeErr(`error ${result.error?.code ?? 'unavailable'}: ${result.failed} more could not be stored (${result.error?.message ?? 'unknown'}); run the command again for them`);
    }
    return result.failed === undefined ? 0 : 1;
  });
}

interface RetryAllFlags extends BulkFlags {
  readonly since?: string;
}
interface CancelAllFlags extends BulkFlags {
  readonly status: string;
  readonly reason?: string;
}
interface CleanFlags extends BulkFlags {
  readonly status: string;
  readonly olderThan: string;
}

function bulkOptions(command: Command): Command {
  return withCommonOptions(command)
    .option('-y, --yes', 'do it without asking (needed when not on a terminal)')
    .option('--dry-run', 'only say how many jobs it would touch');
}

export function registerBulkCommands(program: Command): void {
  bulkOptions(
    program
      .command('retry-all')
      .description('retry every failed job of a queue whose retry chain has no retry yet (one new job each)')
      .argument('<queue>', 'queue name')
      .option('--since <time>', 'only jobs that failed since then: an ISO-8601 time, or a duration ago (e.g. 1h)'),
  ).action(async (queue: string, flags: RetryAllFlags) => {
    const body = flags.since === undefined ? {} : { since: parseSince(flags.since) };
    const since = flags.since === undefined ? '' : ` (failed since ${String(body.since)})`;
    setExitCode(
      await runBulkAction(
        {
          verb: 'retry_all',
          queue,
          body,
          describe: (n) => `retry ${jobs(n, 'failed')}${since} of queue ${queue}`,
          done: (n) => `retried ${jobs(n)} of queue ${queue}: ${n === 1 ? 'a new job' : 'new jobs'} queued`,
          nothing: `no failed job${since} of queue ${queue} without a retry`,
        },
        flags,
      ),
    );
  });

  bulkOptions(
    program
      .command('cancel-all')
      .description('cancel every queued, waiting or delayed job of a queue')
      .argument('<queue>', 'queue name')
      .requiredOption('--status <status>', 'queued (every queued job, delayed ones too), waiting or delayed')
      .option('--reason <text>', 'why (kept on each job; default cancel_all)'),
  ).action(async (queue: string, flags: CancelAllFlags) => {
    const body = { status: flags.status, ...(flags.reason === undefined ? {} : { reason: flags.reason }) };
    setExitCode(
      await runBulkAction(
        {
          verb: 'cancel_all',
          queue,
          body,
          describe: (n) => `cancel ${jobs(n, flags.status)} of queue ${queue}`,
          done: (n) => `cancelled ${jobs(n)} of queue ${queue}`,
          nothing: `no ${flags.status} job of queue ${queue}`,
        },
        flags,
      ),
    );
  });

  bulkOptions(
    program
      .command('clean')
      .description('remove ended jobs from every view (progress, jobs, keys); the log keeps them')
      .argument('<queue>', 'queue name')
      .requiredOption('--older-than <duration>', 'jobs that ended at least this long ago: 500ms, 90s, 30m, 12h, 7d, 1h30m (0: all)')
      .requiredOption('--status <status>', 'succeeded, failed, cancelled, skipped or ignored'),
  ).action(async (queue: string, flags: CleanFlags) => {
    const body = { status: flags.status, older_than_ms: parseDuration(flags.olderThan, '--older-than') };
    setExitCode(
      await runBulkAction(
        {
          verb: 'clean',
          queue,
          body,
          describe: (n) => `remove ${jobs(n, flags.status)} that ended at least ${flags.olderThan} ago from queue ${queue}`,
          done: (n) => `removed ${jobs(n)} from queue ${queue} (the log keeps them)`,
          nothing: `no ${flags.status} job of queue ${queue} ended at least ${flags.olderThan} ago`,
        },
        flags,
      ),
    );
  });
}
