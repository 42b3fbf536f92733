/**
 * Job sets (issue 14): `docket jobset put <queue>` (make a queue a job set: its key source,
 * target and settings), `docket jobset show <queue>` (its definition and progress in DataJoint's
 * terms, with `remaining`), and `docket refresh <queue>` (seed 000's jobs.refresh).
 */
import type { Command } from 'commander';
import type { JobSetShowReply, RefreshReply } from '../commands/jobset-commands.js';
import { InvalidRequestError } from '../errors.js';
import { parseDuration } from './bulk-commands.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseInteger, parseJsonObject } from './options.js';
import { recordTable, writeJson, writeOut } from './render.js';
import { withClient } from './session.js';

interface SourceFlags {
  readonly sql: string | undefined;
  readonly url: string | undefined;
  readonly passwordEnv: string | undefined;
  readonly file: string | undefined;
  readonly command: string | undefined;
  readonly timeoutMs: string | undefined;
}

interface PutFlags extends CommonFlags {
  readonly id?: string;
  readonly sourceSql?: string;
  readonly sourceFile?: string;
  readonly sourceCommand?: string;
  readonly url?: string;
  readonly passwordEnv?: string;
  readonly targetSql?: string;
  readonly targetUrl?: string;
  readonly targetPasswordEnv?: string;
  readonly targetFile?: string;
  readonly targetCommand?: string;
  readonly attributes?: string;
  readonly keepCompleted?: boolean;
  readonly staleTimeout?: string;
  readonly autoRefresh?: boolean;
  readonly priority?: string;
  readonly codeVersion?: string;
  readonly timeoutMs?: string;
}

/** `--source-command`: a JSON array of argv (`'["./keys.sh","--all"]'`), or one program path. */
function parseArgv(value: string, name: string): string[] {
  if (!value.trimStart().startsWith('[')) return [value];
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (err) {
    throw new InvalidRequestError(`${name} must be a JSON array of strings or one program path: ${(err as Error).message}`);
  }
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string')) throw new InvalidRequestError(`${name} must be a JSON array of strings, e.g. '["./keys.sh","--all"]'`);
  return parsed as string[];
}

/** One key source from its flags; undefined when none is given. The node validates the rest. */
function sourceOf(flags: SourceFlags, what: string, names: { sql: string; file: string; command: string; url: string }): Record<string, unknown> | undefined {
  const given = [flags.sql, flags.file, flags.command].filter((v) => v !== undefined).length;
  if (given === 0) {
    if (flags.url !== undefined) throw new InvalidRequestError(`${names.url} needs ${names.sql}`);
    return undefined;
  }
  if (given > 1) throw new InvalidRequestError(`give one ${what}: ${names.sql}, ${names.file} or ${names.command}`);
  const timeout = flags.timeoutMs === undefined ? {} : { timeout_ms: parseInteger(flags.timeoutMs, '--timeout-ms') };
  if (flags.sql !== undefined) {
    if (flags.url === undefined) throw new InvalidRequestError(`${names.sql} needs ${names.url} (postgres://user@host:5432/db or mysql://user@host:3306/db, without a password)`);
    return { url: flags.url, sql: flags.sql, ...(flags.passwordEnv === undefined ? {} : { password_env: flags.passwordEnv }), ...timeout };
  }
  if (flags.file !== undefined) return { file: flags.file };
  return { command: parseArgv(flags.command!, names.command), ...timeout };
}

function sourceText(source: Record<string, unknown> | undefined): string {
  if (source === undefined) return 'none';
  if (typeof source['sql'] === 'string') return `${String(source['url'])}: ${source['sql']}${source['password_env'] ? ` (password from $${String(source['password_env'])})` : ''}`;
  if (typeof source['file'] === 'string') return `file ${source['file']}`;
  if (Array.isArray(source['command'])) return `command ${JSON.stringify(source['command'])}`;
  if (Array.isArray(source['keys'])) return `${source['keys'].length} inline keys`;
  return JSON.stringify(source);
}

function printShow(view: JobSetShowReply): void {
  const j = view.jobset;
  const p = view.progress;
  const last = view.last_refresh;
  writeOut(
    recordTable([
      ['queue', view.queue],
      ['key source', sourceText(j.key_source)],
      ['target', sourceText(j.target)],
      ['attributes', j.attributes?.join(', ') ?? '(every column)'],
      ['keep completed', j.keep_completed ?? 'false (default)'],
      ['stale timeout', j.stale_timeout_s === undefined ? '3600 s (default)' : `${j.stale_timeout_s} s`],
      ['auto refresh', j.auto_refresh ?? 'true (default)'],
      ['default priority', j.default_priority ?? '5 (default)'],
      ['pending', p.pending],
      ['reserved', p.reserved],
      ['success', p.success],
      ['error', p.error + p.cancelled],
      ['ignore', p.ignore],
      ['total', p.total],
      ['remaining', view.remaining ?? `unknown: ${view.remaining_error ?? 'not read'}`],
      ['last refresh', last === null ? 'never' : `${last.at}: added ${last.counts.added}, removed ${last.counts.removed}, orphaned ${last.counts.orphaned}, re-pended ${last.counts.re_pended}`],
    ]),
  );
}

export function registerJobSetCommands(program: Command): void {
  const jobset = program.command('jobset').description("job sets: a queue whose keys come from a key source (DataJoint's jobs table)");

  withCommonOptions(
    jobset
      .command('put')
      .description('make a queue a job set, or replace its definition (settings left out take docket\'s defaults)')
      .argument('<queue>', 'queue name')
      .option('--source-sql <sql>', 'key source: a SELECT whose rows are the keys (with --url)')
      .option('--url <url>', 'the database of --source-sql: postgres://user@host:5432/db or mysql://user@host:3306/db (no password in it)')
      .option('--password-env <name>', 'the environment variable every node reads the database password from')
      .option('--source-file <path>', 'key source: a JSON lines file on the nodes')
      .option('--source-command <argv>', 'key source: a program whose stdout is JSON lines: a JSON array of argv, or one program path')
      .option('--target-sql <sql>', 'target: the keys already computed (with --target-url, default --url)')
      .option('--target-url <url>', 'the database of --target-sql (default: --url)')
      .option('--target-password-env <name>', 'password variable for --target-url (default: --password-env when the URL is the same)')
      .option('--target-file <path>', 'target: a JSON lines file')
      .option('--target-command <argv>', 'target: a program whose stdout is JSON lines')
      .option('--attributes <names>', 'the key attributes, comma separated: rows are projected onto them')
      .option('--keep-completed', 'keep succeeded jobs as success (default: a succeeded job leaves the views)')
      .option('--no-auto-refresh', 'populate does not refresh first')
      .option('--stale-timeout <duration>', 'remove jobs whose key left the source once older than this (e.g. 1h; 0 never); default 1h')
      .option('--priority <n>', 'priority of the jobs a refresh adds (0 most urgent..255); default 5')
      .option('--code-version <text>', 'the version recorded with each run ("git": the worker\'s git hash)')
      .option('--timeout-ms <ms>', 'timeout of the source query or command')
      .option('--id <command-id>', 'command id: resending the same id returns the first result'),
  ).action(async (queue: string, flags: PutFlags) => {
    const keySource = sourceOf({ sql: flags.sourceSql, url: flags.url, passwordEnv: flags.passwordEnv, file: flags.sourceFile, command: flags.sourceCommand, timeoutMs: flags.timeoutMs }, 'key source', {
      sql: '--source-sql',
      file: '--source-file',
      command: '--source-command',
      url: '--url',
    });
    if (keySource === undefined) throw new InvalidRequestError('give the key source: --source-sql with --url, --source-file or --source-command');
    const targetUrl = flags.targetUrl ?? flags.url;
    const targetPasswordEnv = flags.targetPasswordEnv ?? (flags.targetUrl === undefined || flags.targetUrl === flags.url ? flags.passwordEnv : undefined);
    const target = sourceOf({ sql: flags.targetSql, url: flags.targetSql === undefined ? flags.targetUrl : targetUrl, passwordEnv: targetPasswordEnv, file: flags.targetFile, command: flags.targetCommand, timeoutMs: flags.timeoutMs }, 'target', {
      sql: '--target-sql',
      file: '--target-file',
      command: '--target-command',
      url: '--target-url',
    });
    const body = {
      queue,
      key_source: keySource,
      ...(target === undefined ? {} : { target }),
      ...(flags.attributes === undefined ? {} : { attributes: flags.attributes.split(',').map((a) => a.trim()).filter((a) => a !== '') }),
      ...(flags.keepCompleted === true ? { keep_completed: true } : {}),
      ...(flags.autoRefresh === false ? { auto_refresh: false } : {}),
      ...(flags.staleTimeout === undefined ? {} : { stale_timeout_s: Math.round(parseDuration(flags.staleTimeout, '--stale-timeout') / 1000) }),
      ...(flags.priority === undefined ? {} : { default_priority: parseInteger(flags.priority, '--priority') }),
      ...(flags.codeVersion === undefined ? {} : { version: flags.codeVersion }),
      ...(flags.id === undefined ? {} : { id: flags.id }),
    };
    await withClient(flags, async (client) => {
      const reply = await client.request<Record<string, unknown>>('jobset.put', body);
      if (flags.json) writeJson({ ...reply, ok: true });
      else writeOut(`queue ${queue} is a job set (key source ${sourceText(keySource)}); run docket refresh ${queue} to queue its missing keys`);
    });
  });

  withCommonOptions(
    jobset
      .command('show')
      .description("a job set's definition and progress: pending, reserved, success, error, ignore, and remaining (source keys not in the target)")
      .argument('<queue>', 'queue name')
      .option('--no-remaining', 'do not read the sources to count remaining keys'),
  ).action(async (queue: string, flags: CommonFlags & { remaining?: boolean }) => {
    await withClient(flags, async (client) => {
      const view = await client.showJobSet(queue, flags.remaining === false ? { remaining: false } : {});
      if (flags.json) writeJson({ ok: true, ...view });
      else printShow(view);
    });
  });

  withCommonOptions(
    jobset
      .command('ignore')
      .description('ignore a key (also one with no job yet): never handed out, never removed as stale; jobset delete frees it')
      .argument('<queue>', 'queue name')
      .argument('<key>', 'the key as a JSON object, e.g. \'{"subject_id":3,"session_id":1}\'')
      .option('--reason <text>', 'why, kept on the job')
      .option('--id <command-id>', 'command id: resending the same id returns the first result'),
  ).action(async (queue: string, key: string, flags: CommonFlags & { reason?: string; id?: string }) => {
    const body = { queue, key: parseJsonObject(key, '<key>'), ...(flags.reason === undefined ? {} : { reason: flags.reason }), ...(flags.id === undefined ? {} : { id: flags.id }) };
    await withClient(flags, async (client) => {
      const reply = await client.ignore(body as Parameters<typeof client.ignore>[0]);
      if (flags.json) writeJson({ ok: true, ...reply });
      else writeOut(`key ${key} of ${queue} is ignored (job ${reply.job_id}${reply.created ? '' : ', already'})`);
    });
  });

  withCommonOptions(
    jobset
      .command('delete')
      .description('remove jobs from the views (not running ones) so the next refresh adds their keys again, e.g. --status error')
      .argument('<queue>', 'queue name')
      .option('--key <json>', 'one key, as a JSON object')
      .option('--status <status>', 'pending, success, error or ignore')
      .option('--restrict <json>', 'keys matching an object of attribute values, or a JSON array of them (any)')
      .option('--id <command-id>', 'command id: resending the same id returns the first result'),
  ).action(async (queue: string, flags: CommonFlags & { key?: string; status?: string; restrict?: string; id?: string }) => {
    const body = {
      queue,
      ...(flags.key === undefined ? {} : { key: parseJsonObject(flags.key, '--key') }),
      ...(flags.status === undefined ? {} : { status: flags.status }),
      ...(flags.restrict === undefined ? {} : { restrict: parseRestrict(flags.restrict) }),
      ...(flags.id === undefined ? {} : { id: flags.id }),
    };
    await withClient(flags, async (client) => {
      const reply = await client.deleteJobs(body as Parameters<typeof client.deleteJobs>[0]);
      if (flags.json) writeJson({ ok: true, ...reply });
      else writeOut(`deleted ${reply.deleted} job${reply.deleted === 1 ? '' : 's'} of ${queue}${reply.running > 0 ? ` (${reply.running} running left alone: cancel them first)` : ''}`);
    });
  });

  withCommonOptions(
    program
      .command('refresh')
      .description('refresh a job set: queue its missing keys, re-pend (keep completed), remove stale and orphaned jobs')
      .argument('<queue>', 'queue name')
      .option('--restrict <json>', 'only add keys matching: an object of attribute values, or a JSON array of them (any)')
      .option('--delay <duration>', 'new jobs are due after this long (e.g. 10m)')
      .option('--priority <n>', 'priority of the new jobs (default: the job set\'s)')
      .option('--stale-timeout <duration>', 'this refresh\'s stale timeout (0: no stale cleanup)')
      .option('--orphan-timeout <duration>', 'remove running jobs claimed longer ago than this and queue their keys again')
      .option('--id <command-id>', 'command id: resending the same id returns the first result'),
  ).action(async (queue: string, flags: CommonFlags & { restrict?: string; delay?: string; priority?: string; staleTimeout?: string; orphanTimeout?: string; id?: string }) => {
    const restrict = flags.restrict === undefined ? undefined : parseRestrict(flags.restrict);
    const body = {
      queue,
      ...(restrict === undefined ? {} : { restrict }),
      ...(flags.delay === undefined ? {} : { delay_ms: parseDuration(flags.delay, '--delay') }),
      ...(flags.priority === undefined ? {} : { priority: parseInteger(flags.priority, '--priority') }),
      ...(flags.staleTimeout === undefined ? {} : { stale_timeout_s: Math.round(parseDuration(flags.staleTimeout, '--stale-timeout') / 1000) }),
      ...(flags.orphanTimeout === undefined ? {} : { orphan_timeout_s: Math.round(parseDuration(flags.orphanTimeout, '--orphan-timeout') / 1000) }),
      ...(flags.id === undefined ? {} : { id: flags.id }),
    };
    await withClient(flags, async (client) => {
      const reply: RefreshReply = await client.refresh(body as Parameters<typeof client.refresh>[0]);
      if (flags.json) writeJson({ ok: true, ...reply });
      else writeOut(`refreshed ${queue}: added ${reply.added}, removed ${reply.removed}, orphaned ${reply.orphaned}, re-pended ${reply.re_pended}${reply.replayed ? ' (an earlier send of this command id)' : ''}`);
    });
  });
}

/** `--restrict`: an object of attribute values, or a JSON array of them (any matches). */
export function parseRestrict(value: string): unknown {
  return value.trimStart().startsWith('[') ? parseRestrictList(value) : parseJsonObject(value, '--restrict');
}

function parseRestrictList(value: string): unknown[] {
  try {
    const parsed: unknown = JSON.parse(value);
    if (Array.isArray(parsed)) return parsed;
  } catch (err) {
    throw new InvalidRequestError(`--restrict must be a JSON object or array: ${(err as Error).message}`);
  }
  throw new InvalidRequestError('--restrict must be a JSON object or array');
}
