/**
 * The schedule and template commands of the CLI: `docket schedule next <cron>` (the next fire
 * times of a cron in a time zone, docket.cmd.schedule.preview), `docket schedule
 * put|add|enable|disable|delete|trigger|backfill|show|ls` and `docket template
 * put|archive|show|ls`. Times are shown in the schedule's zone and in UTC; `--json` prints the reply.
 */
import type { Command } from 'commander';
import type { SchedulePutCommand, TemplatePutCommand } from '../commands/schedule-schemas.js';
import type { ScheduleView, TemplateView } from '../schedules/sys-commands.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseInteger, parseIsoTime, parseJsonObject, parsePositiveInteger } from './options.js';
import { recordTable, table, writeJson, writeOut } from './render.js';
import { withClient } from './session.js';

interface NextFlags extends CommonFlags {
  readonly tz?: string;
  readonly from?: string;
  readonly count?: string;
}

/** `2026-03-08 03:00:00 EDT`: a time as a person in `timeZone` reads it. */
function wallClock(iso: string, timeZone: string): string {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    timeZoneName: 'short',
  }).formatToParts(new Date(iso));
  const f = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
  return `${f('year')}-${f('month')}-${f('day')} ${f('hour')}:${f('minute')}:${f('second')} ${f('timeZoneName')}`;
}

async function nextAction(cron: string, flags: NextFlags): Promise<void> {
  const options = {
    ...(flags.tz === undefined ? {} : { timezone: flags.tz }),
    ...(flags.from === undefined ? {} : { from: parseIsoTime(flags.from, '--from') }),
    ...(flags.count === undefined ? {} : { count: parsePositiveInteger(flags.count, '--count') }),
  };
  const reply = await withClient(flags, (client) => client.previewSchedule(cron, options));
  if (flags.json) {
    writeJson({ ok: true, ...reply });
    return;
  }
  if (reply.times.length === 0) {
    writeOut(`no fire times for ${JSON.stringify(cron)} in ${reply.timezone}`);
    return;
  }
  writeOut(table([`time (${reply.timezone})`, 'UTC'], reply.times.map((t) => [wallClock(t, reply.timezone), t])));
}

interface PutFlags extends CommonFlags {
  readonly cron: string;
  readonly template?: string;
  readonly queue?: string;
  readonly params?: string;
  readonly priority?: string;
  readonly maxAttempts?: string;
  readonly tz?: string;
  readonly startAt?: string;
  readonly endAt?: string;
  readonly jitterMs?: string;
  readonly catchup?: string;
  readonly catchupWindowMs?: string;
  readonly overlap?: string;
  readonly paused?: boolean;
  readonly enabled?: boolean;
  readonly note?: string;
  readonly id?: string;
}

/** The put's body from the flags; the node validates every field (and names the one it refuses). */
function putBody(name: string, f: PutFlags): SchedulePutCommand {
  const params = f.params === undefined ? undefined : parseJsonObject(f.params, '--params');
  const job =
    f.template !== undefined
      ? undefined
      : {
          queue: f.queue ?? '',
          ...(params === undefined ? {} : { params }),
          ...(f.priority === undefined ? {} : { priority: parseInteger(f.priority, '--priority') }),
          ...(f.maxAttempts === undefined ? {} : { max_attempts: parsePositiveInteger(f.maxAttempts, '--max-attempts') }),
        };
  return {
    name,
    cron: f.cron,
    ...(f.template === undefined ? {} : { template: f.template }),
    ...(job === undefined ? {} : { job }),
    // With a template, --params are merged over the template's; with a job they are the job's.
    ...(f.template !== undefined && params !== undefined ? { params } : {}),
    ...(f.tz === undefined ? {} : { timezone: f.tz }),
    ...(f.startAt === undefined ? {} : { start_at: parseIsoTime(f.startAt, '--start-at') }),
    ...(f.endAt === undefined ? {} : { end_at: parseIsoTime(f.endAt, '--end-at') }),
    ...(f.jitterMs === undefined ? {} : { jitter_ms: parseInteger(f.jitterMs, '--jitter-ms') }),
    ...(f.catchup === undefined ? {} : { catchup: f.catchup as SchedulePutCommand['catchup'] }),
    ...(f.catchupWindowMs === undefined ? {} : { catchup_window_ms: parseInteger(f.catchupWindowMs, '--catchup-window-ms') }),
    ...(f.overlap === undefined ? {} : { overlap: f.overlap as SchedulePutCommand['overlap'] }),
    ...(f.paused ? { paused: true } : f.enabled ? { paused: false } : {}),
    ...(f.note === undefined ? {} : { note: f.note }),
    ...(f.id === undefined ? {} : { id: f.id }),
  } as SchedulePutCommand;
}

/** What a schedule makes its jobs from, in a few words. */
function sourceOf(v: ScheduleView): string {
  if (v.spec === null) return '';
  return v.spec.template !== null ? `template ${v.spec.template}` : `queue ${v.spec.job?.queue ?? ''}`;
}

function lastFireText(v: ScheduleView): string {
  const last = v.last_fired;
  if (last === null) return '-';
  return `${wallClock(last.tick, v.spec?.timezone ?? 'UTC')} ${last.trigger === 'cron' ? '' : `(${last.trigger}) `}${last.job_id} ${last.job_status ?? 'not folded yet'}`;
}

function writeSchedule(v: ScheduleView, json: boolean): void {
  if (json) {
    writeJson({ ok: true, ...v });
    return;
  }
  const zone = v.spec?.timezone ?? 'UTC';
  const spec = v.spec;
  writeOut(
    recordTable([
      ['name', v.name],
      ['status', v.disabled_note ? `${v.status} (${v.disabled_note})` : v.status],
      ['revision', v.revision],
      ['cron', spec ? `${spec.cron} (${zone})` : ''],
      ['makes', sourceOf(v)],
      ['params', spec?.params ? JSON.stringify(spec.params) : ''],
      ['catch-up', spec ? `${spec.catchup}${spec.catchup_window_ms === null ? '' : ` within ${spec.catchup_window_ms} ms`}` : ''],
      ['overlap', spec?.overlap ?? ''],
      ['window', spec ? `${spec.start_at ?? '-'} .. ${spec.end_at ?? '-'}` : ''],
      ['jitter', spec ? `${spec.jitter_ms} ms` : ''],
      ['handled until', v.handled_until ?? '-'],
      ['last fire', lastFireText(v)],
      ['fired / missed', `${v.fired_count} / ${v.missed_count}`],
      ['note', spec?.note ?? ''],
    ]),
  );
  if (v.next.length > 0) writeOut(table([`next (${zone})`, 'UTC'], v.next.map((t) => [wallClock(t, zone), t])));
}

function writeTemplate(v: TemplateView, json: boolean): void {
  if (json) {
    writeJson({ ok: true, ...v });
    return;
  }
  const s = v.spec;
  writeOut(
    recordTable([
      ['name', v.name],
      ['status', v.status],
      ['revision', v.revision],
      ['queue', s?.queue ?? ''],
      ['params', s ? JSON.stringify(s.params) : ''],
      ['priority', s?.priority ?? ''],
      ['max attempts', s?.max_attempts ?? ''],
      ['lease ms', s?.lease_ms ?? ''],
      ['description', s?.description ?? ''],
      ['updated', v.updated_at],
    ]),
  );
}

export function registerScheduleCommands(program: Command): void {
  registerTemplateCommands(program);
  const schedule = program.command('schedule').description('cron schedules: put, enable, disable, delete, trigger, backfill, show, ls, next');
  for (const verb of ['put', 'add']) {
    withCommonOptions(
      schedule
        .command(verb)
        .description(verb === 'put' ? 'create or revise a schedule (each put is its next revision)' : 'the same as put')
        .argument('<name>', 'the schedule name: 1-128 of [A-Za-z0-9_-]')
        .requiredOption('--cron <cron>', "5 fields, or 6 with seconds first: '0 9 * * MON-FRI'")
        .option('--template <name>', 'make each job from this template (--params are merged over its params)')
        .option('--queue <queue>', 'without a template: the queue of each job')
        .option('--params <json>', 'a JSON object: the job params (merged over the template\'s)')
        .option('--priority <n>', 'without a template: 0..255, lower first')
        .option('--max-attempts <n>', 'without a template: attempts per job')
        .option('--tz <zone>', 'IANA time zone the cron is read in (default UTC)')
        .option('--start-at <iso>', 'no tick before this time')
        .option('--end-at <iso>', 'no tick at or after this time')
        .option('--jitter-ms <ms>', 'fire each tick up to this much later (derived, not random)')
        .option('--catchup <policy>', 'after downtime: none | latest | all (default latest)')
        .option('--catchup-window-ms <ms>', 'ticks missed longer ago than this are not caught up')
        .option('--overlap <policy>', 'while the last job is live: skip | buffer_one | buffer_all | allow_all | cancel_other (default skip)')
        .option('--paused', 'leave the schedule disabled')
        .option('--enabled', 'enable the schedule (an existing one keeps its state otherwise)')
        .option('--note <text>', 'a note kept with the schedule')
        .option('--id <id>', 'a command id: a resend with it is answered with the first result'),
    ).action(async (name: string, flags: PutFlags) => {
      const body = putBody(name, flags);
      writeSchedule(await withClient(flags, (client) => client.putSchedule(body)), flags.json === true);
    });
  }
  withCommonOptions(schedule.command('enable').description('enable a disabled schedule (ticks due meanwhile are missed as paused)').argument('<name>')).action(async (name: string, flags: CommonFlags) =>
    writeSchedule(await withClient(flags, (client) => client.enableSchedule(name)), flags.json === true),
  );
  withCommonOptions(schedule.command('disable').description('disable a schedule').argument('<name>').option('--note <text>', 'why')).action(async (name: string, flags: CommonFlags & { note?: string }) =>
    writeSchedule(await withClient(flags, (client) => client.disableSchedule(name, flags.note === undefined ? {} : { note: flags.note })), flags.json === true),
  );
  withCommonOptions(schedule.command('delete').description('delete a schedule: nothing fires any more').argument('<name>')).action(async (name: string, flags: CommonFlags) =>
    writeSchedule(await withClient(flags, (client) => client.deleteSchedule(name)), flags.json === true),
  );
  withCommonOptions(schedule.command('trigger').description('fire a schedule now, outside its cron').argument('<name>').option('--id <id>', 'a command id: a resend fires once')).action(
    async (name: string, flags: CommonFlags & { id?: string }) => {
      const reply = await withClient(flags, (client) => client.triggerSchedule(name, flags.id === undefined ? {} : { id: flags.id }));
      if (flags.json) writeJson({ ok: true, ...reply });
      else writeOut(`fired ${reply.schedule} at ${reply.tick}: job ${reply.job_id}${reply.replayed ? ' (already fired by this command id)' : ''}`);
    },
  );
  withCommonOptions(
    schedule
      .command('backfill')
      .description('fire every past tick of [from, to] that has no job yet')
      .argument('<name>')
      .requiredOption('--from <iso>', 'first tick (inclusive)')
      .requiredOption('--to <iso>', 'last tick (inclusive), not in the future')
      .option('--id <id>', 'a command id'),
  ).action(async (name: string, flags: CommonFlags & { from: string; to: string; id?: string }) => {
    const from = parseIsoTime(flags.from, '--from');
    const to = parseIsoTime(flags.to, '--to');
    const reply = await withClient(flags, (client) => client.backfillSchedule(name, from, to, flags.id === undefined ? {} : { id: flags.id }));
    if (flags.json) writeJson({ ok: true, ...reply });
    else writeOut(`backfilled ${reply.schedule}: ${reply.fired.length} fired, ${reply.skipped.length} skipped (a job exists, or the cron has not reached them)`);
  });
  withCommonOptions(schedule.command('show').description('a schedule, its last fire and its next fire times').argument('<name>')).action(async (name: string, flags: CommonFlags) =>
    writeSchedule(await withClient(flags, (client) => client.getSchedule(name)), flags.json === true),
  );
  withCommonOptions(schedule.command('ls').description('the schedules').option('--status <status>', 'enabled | disabled | deleted (default: all but deleted)')).action(
    async (flags: CommonFlags & { status?: 'enabled' | 'disabled' | 'deleted' }) => {
      const list = await withClient(flags, (client) => client.listSchedules(flags.status === undefined ? {} : { status: flags.status }));
      if (flags.json) {
        writeJson({ ok: true, schedules: list });
        return;
      }
      writeOut(
        table(
          ['name', 'status', 'cron', 'zone', 'makes', 'next', 'last fire', 'fired', 'missed'],
          list.map((v) => [v.name, v.status, v.spec?.cron ?? '', v.spec?.timezone ?? '', sourceOf(v), v.next[0] ? wallClock(v.next[0], v.spec?.timezone ?? 'UTC') : '-', lastFireText(v), v.fired_count, v.missed_count]),
        ),
      );
    },
  );
  withCommonOptions(
    schedule
      .command('next')
      .description('the next fire times of a cron (5 fields, or 6 with seconds first) in a time zone')
      .argument('<cron>', "a cron expression, quoted: '0 9 * * MON-FRI'")
      .option('--tz <zone>', 'IANA time zone the cron is read in (default UTC)')
      .option('--from <iso>', 'list the times after this ISO-8601 time (default: now)')
      .option('--count <n>', 'how many times (default 5, at most 1000)'),
  ).action(async (cron: string, flags: NextFlags) => nextAction(cron, flags));
}

interface TemplatePutFlags extends CommonFlags {
  readonly queue: string;
  readonly params?: string;
  readonly priority?: string;
  readonly maxAttempts?: string;
  readonly leaseMs?: string;
  readonly description?: string;
  readonly id?: string;
}

function registerTemplateCommands(program: Command): void {
  const template = program.command('template').description('job templates: put, archive, show, ls');
  withCommonOptions(
    template
      .command('put')
      .description('create or revise a template (each put is its next revision)')
      .argument('<name>', 'the template name: 1-128 of [A-Za-z0-9_-]')
      .requiredOption('--queue <queue>', 'the queue of its jobs')
      .option('--params <json>', 'default params (a submit\'s or schedule\'s are merged over them)')
      .option('--priority <n>', '0..255, lower first')
      .option('--max-attempts <n>', 'attempts per job')
      .option('--lease-ms <ms>', 'the lease of its runs')
      .option('--description <text>', 'what it is for')
      .option('--id <id>', 'a command id'),
  ).action(async (name: string, f: TemplatePutFlags) => {
    const body = {
      name,
      queue: f.queue,
      ...(f.params === undefined ? {} : { params: parseJsonObject(f.params, '--params') }),
      ...(f.priority === undefined ? {} : { priority: parseInteger(f.priority, '--priority') }),
      ...(f.maxAttempts === undefined ? {} : { max_attempts: parsePositiveInteger(f.maxAttempts, '--max-attempts') }),
      ...(f.leaseMs === undefined ? {} : { lease_ms: parsePositiveInteger(f.leaseMs, '--lease-ms') }),
      ...(f.description === undefined ? {} : { description: f.description }),
      ...(f.id === undefined ? {} : { id: f.id }),
    } as TemplatePutCommand;
    writeTemplate(await withClient(f, (client) => client.putTemplate(body)), f.json === true);
  });
  withCommonOptions(template.command('archive').description('archive a template: it refuses new jobs').argument('<name>')).action(async (name: string, flags: CommonFlags) =>
    writeTemplate(await withClient(flags, (client) => client.archiveTemplate(name)), flags.json === true),
  );
  withCommonOptions(template.command('show').description('a template').argument('<name>')).action(async (name: string, flags: CommonFlags) =>
    writeTemplate(await withClient(flags, (client) => client.getTemplate(name)), flags.json === true),
  );
  withCommonOptions(template.command('ls').description('the templates')).action(async (flags: CommonFlags) => {
    const list = await withClient(flags, (client) => client.listTemplates());
    if (flags.json) {
      writeJson({ ok: true, templates: list });
      return;
    }
    writeOut(table(['name', 'status', 'revision', 'queue', 'params', 'updated'], list.map((v) => [v.name, v.status, v.revision, v.spec?.queue ?? '', v.spec ? JSON.stringify(v.spec.params) : '', v.updated_at])));
  });
}
