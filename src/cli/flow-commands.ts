/**
 * Flow-control commands: `pause`, `resume`, `queue show|set`, `reserve`, `release`, `renew`,
 * `reservations`, and `run-direct <queue> -- <command...>`, which reserves the queue with a job
 * of its own, runs the command as that job (ahead of the queue), completes or fails it by the
 * command's exit code, and releases the reservation.
 */
import { spawn } from 'node:child_process';
import type { Command } from 'commander';
import type { QueueSettingsChange, RateLimit } from '../../machines/index.js';
import type { Client } from '../client/client.js';
import type { QueueShow } from '../commands/flow-queries.js';
import type { GroupView, listGroups } from '../commands/group-commands.js';
import type { QueueView } from '../commands/queue-commands.js';
import type { ReservationView } from '../commands/reservation-commands.js';
import { InvalidRequestError } from '../errors.js';
import type { Mutable } from '../mutable.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseJsonObject, parsePositiveInteger } from './options.js';
import { recordTable, table, writeJson, writeOut } from './render.js';
import { setExitCode, withClient } from './session.js';
import { resolveCommand } from './run-command.js';

interface QueueFlags extends CommonFlags {
  readonly reason?: string;
  readonly actor?: string;
  readonly create?: boolean;
  readonly id?: string;
}

interface SetFlags extends QueueFlags {
  readonly concurrency?: string;
  readonly rate?: string;
  readonly keyConcurrency?: string;
  readonly keyRate?: string;
}

/** `--concurrency 3`, or `none` to clear it. */
function parseLimit(value: string, name: string): number | null {
  return value === 'none' ? null : parsePositiveInteger(value, name);
}

/** `--rate 50/1000` (claims per period in ms), or `none` to clear it. */
function parseRate(value: string, name: string): RateLimit | null {
  if (value === 'none') return null;
  const match = /^(\d+)\/(\d+)$/.exec(value);
  if (!match) throw new InvalidRequestError(`${name} must be <claims>/<period ms> (e.g. 50/1000) or none, got ${JSON.stringify(value)}`);
  return { limit: Number(match[1]), period_ms: Number(match[2]) };
}

function rateText(rate: RateLimit | null): string {
  return rate === null ? 'none' : `${rate.limit} per ${rate.period_ms} ms`;
}

function queueLines(view: QueueView): [string, unknown][] {
  const s = view.settings;
  return [
    ['queue', view.queue],
    ['status', view.paused ? `paused${view.paused.reason ? `: ${view.paused.reason}` : ''} (by ${view.paused.by ?? '?'} at ${view.paused.at})` : 'active'],
    ['concurrency', s.concurrency ?? 'none'],
    ['rate', rateText(s.rate)],
    ['key concurrency', s.key_concurrency ?? 'none'],
    ['key rate', rateText(s.key_rate)],
  ];
}

function printQueue(view: QueueView | QueueShow, flags: CommonFlags): void {
  if (flags.json) {
    writeJson({ ok: true, ...view });
    return;
  }
  const lines = queueLines(view);
  if ('running' in view) {
    const r = view.reservation;
    lines.push(['reservation', r ? `${r.reservation_id} by ${r.holder} until ${r.expires_at}` : 'none']);
    lines.push(['running', view.running]);
    lines.push(['held', view.held ? `${view.held.reason}: ${view.held.detail}${view.held.until ? ` (until ${view.held.until})` : ''}` : 'no']);
    const waiting = Object.entries(view.waiting_by_reason).map(([reason, n]) => `${reason} ${n}`).join(', ');
    lines.push(['waiting by reason', `${waiting || 'none'}${view.waiting_truncated ? ' (at least)' : ''}`]);
  }
  writeOut(recordTable(lines));
}

function printReservations(reservations: readonly ReservationView[], flags: CommonFlags): void {
  if (flags.json) writeJson({ ok: true, reservations });
  else if (reservations.length === 0) writeOut('no active reservations');
  else writeOut(table(['queue', 'reservation', 'holder', 'expires at', 'job'], reservations.map((r) => [r.queue, r.reservation_id, r.holder, r.expires_at, r.job_id])));
}

function optional<T extends object>(fields: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)) as { [K in keyof T]: Exclude<T[K], undefined> };
}

interface DirectFlags extends CommonFlags {
  readonly holder?: string;
  readonly ttlMs?: string;
  readonly leaseMs?: string;
  readonly params?: string;
}

/** How often run-direct heartbeats its job and renews its reservation: a third of each period. */
const RENEW_FRACTION = 3;

/** Reserves with a job, runs the command as it, ends the job by the exit code, releases. Exits with the command's code. */
async function runDirect(client: Client, queue: string, argv: readonly string[], flags: DirectFlags): Promise<number> {
  const [command, ...args] = argv;
  if (command === undefined) throw new InvalidRequestError('give the command to run after --, e.g. docket run-direct reports -- ./make-report.sh');
  const file = resolveCommand(command);
  const ttlMs = flags.ttlMs === undefined ? 60_000 : parsePositiveInteger(flags.ttlMs, '--ttl-ms');
  const leaseMs = flags.leaseMs === undefined ? 30_000 : parsePositiveInteger(flags.leaseMs, '--lease-ms');
  const params = flags.params === undefined ? {} : parseJsonObject(flags.params, '--params');
  const reserved = await client.reserve(queue, { holder: flags.holder ?? `run-direct@${process.pid}`, ttl_ms: ttlMs, lease_ms: leaseMs, job: { params: params as never } });
  const job = reserved.job!;
  const work = (verb: string, body: unknown) => client.nc.request(`docket.work.${queue}.${verb}`, JSON.stringify(body), { timeout: 30_000 });
  // Keep both alive while the command runs: the job's lease and the reservation.
  const keepAlive = setInterval(() => {
    void work('heartbeat', { run_ids: [job.run_id] }).catch(() => undefined);
    void client.renew(reserved.reservation_id, ttlMs).catch(() => undefined);
  }, Math.min(leaseMs, ttlMs) / RENEW_FRACTION);
  let code: number;
  let stderr = '';
  try {
    code = await new Promise<number>((resolve, reject) => {
      const child = spawn(file, args, { stdio: ['ignore', 'inherit', 'pipe'], env: { ...process.env, DOCKET_JOB_ID: job.job_id, DOCKET_RUN_ID: job.run_id, DOCKET_QUEUE: queue, DOCKET_PARAMS: JSON.stringify(job.params) } });
      child.stderr.on('data', (chunk: Buffer) => {
        process.stderr.write(chunk);
        stderr = (stderr + chunk.toString('utf8')).slice(-4096);
      });
      child.once('error', reject);
      child.once('close', (exit, signal) => resolve(exit ?? (signal ? 128 : 1)));
    });
  } finally {
    clearInterval(keepAlive);
  }
  const end = code === 0 ? work('complete', { run_id: job.run_id, job_id: job.job_id, exit_code: code }) : work('fail', { run_id: job.run_id, job_id: job.job_id, exit_code: code, error: { message: stderr.trim() || `exit code ${code}` } });
  await end;
  await client.release(reserved.reservation_id);
  if (flags.json) writeJson({ ok: code === 0, job_id: job.job_id, reservation_id: reserved.reservation_id, exit_code: code });
  else writeOut(`job ${job.job_id} ${code === 0 ? 'succeeded' : `failed (exit code ${code})`}; reservation ${reserved.reservation_id} released`);
  return code;
}

export function registerFlowCommands(program: Command): void {
  const groupCommand = program.command('group').description('groups of jobs run in order or together (create them with docket.cmd.group.create or the SDK)');
  withCommonOptions(groupCommand.command('show').description('a group, its derived status and each member').argument('<group_id>', 'group id')).action(async (id: string, flags: CommonFlags) => {
    const group = await withClient(flags, (client) => client.request<GroupView>('group.get', { group_id: id }));
    if (flags.json) {
      writeJson({ ...group, ok: true });
      return;
    }
    writeOut(recordTable([['group', group.group_id], ['name', group.name], ['mode', group.mode], ['on failure', group.on_failure], ['status', group.status], ['created at', group.created_at], ['ended at', group.ended_at]]));
    writeOut(table(['#', 'job', 'queue', 'status'], group.members.map((m, i) => [i, m.job_id, m.queue, m.status])));
  });
  withCommonOptions(groupCommand.command('ls').description('every group and its status')).action(async (flags: CommonFlags) => {
    const { groups } = await withClient(flags, (client) => client.request<ReturnType<typeof listGroups>>('group.list', {}));
    if (flags.json) writeJson({ ok: true, groups });
    else if (groups.length === 0) writeOut('no groups');
    else writeOut(table(['group', 'name', 'mode', 'status', 'created at', 'ended at'], groups.map((g) => [g.group_id, g.name, g.mode, g.status, g.created_at, g.ended_at])));
  });
  withCommonOptions(groupCommand.command('cancel').description("cancel a group's live members").argument('<group_id>', 'group id').option('--reason <text>', 'why')).action(
    async (id: string, flags: CommonFlags & { reason?: string }) => {
      const result = await withClient(flags, (client) => client.request<{ group_id: string; cancelled: string[] }>('group.cancel', { group_id: id, ...(flags.reason === undefined ? {} : { reason: flags.reason }) }));
      if (flags.json) writeJson({ ok: true, ...result });
      else writeOut(`group ${result.group_id}: ${result.cancelled.length} live member(s) cancelled`);
    },
  );

  const common = (c: Command) => withCommonOptions(c).option('--id <command-id>', 'command id: resending the same id returns the first result');
  common(
    program
      .command('pause')
      .description('pause a queue: it takes submits and hands out nothing until resumed')
      .argument('<queue>', 'queue name')
      .option('--reason <text>', 'why, kept in the log')
      .option('--actor <name>', 'who, kept in the log (meta.actor)')
      .option('--create', 'pause a queue that has no job yet'),
  ).action(async (queue: string, flags: QueueFlags) => {
    const view = await withClient(flags, (client) => client.pause(queue, optional({ reason: flags.reason, actor: flags.actor, id: flags.id, create: flags.create })));
    printQueue(view, flags);
  });
  common(program.command('resume').description('resume a paused queue').argument('<queue>', 'queue name').option('--actor <name>', 'who, kept in the log')).action(
    async (queue: string, flags: QueueFlags) => printQueue(await withClient(flags, (client) => client.resume(queue, optional({ actor: flags.actor, id: flags.id }))), flags),
  );

  const queue = program.command('queue').description("a queue's own state: flow-control settings, pause, reservation");
  withCommonOptions(queue.command('show').description('settings, pause, reservation, running jobs and what holds the waiting ones').argument('<queue>', 'queue name')).action(
    async (name: string, flags: CommonFlags) => printQueue(await withClient(flags, (client) => client.showQueue(name)), flags),
  );
  common(
    queue
      .command('set')
      .description('change flow-control settings (each kept in the log with who made it)')
      .argument('<queue>', 'queue name')
      .option('--concurrency <n|none>', 'at most n jobs running at once across all workers')
      .option('--rate <claims/ms|none>', 'at most this many claims in any window of this many ms, e.g. 50/1000')
      .option('--key-concurrency <n|none>', "per job concurrency_key: at most n running at once (other keys go ahead)")
      .option('--key-rate <claims/ms|none>', 'per job concurrency_key: at most this many claims per window')
      .option('--actor <name>', 'who, kept in the log (meta.actor)')
      .option('--create', 'configure a queue that has no job yet'),
  ).action(async (name: string, flags: SetFlags) => {
    const change: Mutable<QueueSettingsChange> = {};
    if (flags.concurrency !== undefined) change.concurrency = parseLimit(flags.concurrency, '--concurrency');
    if (flags.rate !== undefined) change.rate = parseRate(flags.rate, '--rate');
    if (flags.keyConcurrency !== undefined) change.key_concurrency = parseLimit(flags.keyConcurrency, '--key-concurrency');
    if (flags.keyRate !== undefined) change.key_rate = parseRate(flags.keyRate, '--key-rate');
    printQueue(await withClient(flags, (client) => client.setQueue(name, { ...change, ...optional({ actor: flags.actor, id: flags.id, create: flags.create }) })), flags);
  });

  common(
    program
      .command('reserve')
      .description("take the queue's one reservation: while it is active the queue hands out no queued job")
      .argument('<queue>', 'queue name')
      .requiredOption('--holder <name>', 'who holds it (named in conflicts)')
      .requiredOption('--ttl-ms <n>', 'it expires this many ms from now unless renewed (at least 1000)')
      .option('--create', 'reserve a queue that has no job yet'),
  ).action(async (name: string, flags: QueueFlags & { holder: string; ttlMs: string }) => {
    const reserved = await withClient(flags, (client) => client.reserve(name, { holder: flags.holder, ttl_ms: parsePositiveInteger(flags.ttlMs, '--ttl-ms'), ...optional({ id: flags.id, create: flags.create }) }));
    if (flags.json) writeJson({ ok: true, ...reserved });
    else writeOut(`reserved ${name}: ${reserved.reservation_id}, until ${reserved.expires_at}`);
  });
  common(program.command('release').description('end a reservation').argument('<reservation_id>', 'the id reserve returned')).action(async (id: string, flags: QueueFlags) => {
    const released = await withClient(flags, (client) => client.release(id, optional({ id: flags.id })));
    if (flags.json) writeJson({ ok: true, ...released });
    else writeOut(`released ${released.reservation_id}`);
  });
  common(program.command('renew').description("push a reservation's expiry").argument('<reservation_id>', 'the id reserve returned').requiredOption('--ttl-ms <n>', 'from now')).action(
    async (id: string, flags: QueueFlags & { ttlMs: string }) => {
      const renewed = await withClient(flags, (client) => client.renew(id, parsePositiveInteger(flags.ttlMs, '--ttl-ms'), optional({ id: flags.id })));
      if (flags.json) writeJson({ ok: true, ...renewed });
      else writeOut(`renewed ${renewed.reservation_id} until ${renewed.expires_at}`);
    },
  );
  withCommonOptions(program.command('reservations').description('the active reservations').argument('[queue]', 'one queue (default: all)')).action(
    async (name: string | undefined, flags: CommonFlags) => printReservations(await withClient(flags, (client) => client.reservations(name)), flags),
  );
  withCommonOptions(
    program
      .command('run-direct')
      .description('reserve the queue, run one job of its own with the command (ahead of the queue), complete or fail it by the exit code, release')
      .argument('<queue>', 'queue name')
      .argument('<command...>', 'the command and its arguments, after --')
      .option('--holder <name>', 'who holds the reservation (default run-direct@<pid>)')
      .option('--ttl-ms <n>', 'reservation ttl, renewed while the command runs (default 60000)')
      .option('--lease-ms <n>', "the job's lease, heartbeaten while the command runs (default 30000)")
      .option('--params <json>', "the job's params (also in $DOCKET_PARAMS)"),
  ).action(async (name: string, argv: string[], flags: DirectFlags) => setExitCode(await withClient(flags, (client) => runDirect(client, name, argv, flags))));
}
