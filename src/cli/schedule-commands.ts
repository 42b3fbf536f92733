/**
 * The schedule commands of the CLI. Today: `docket schedule next <cron>`, the next fire times of a
 * cron in a time zone (docket.cmd.schedule.preview), in the zone's wall-clock time and in UTC.
 * The commands that store schedules and templates (add, ls, show, enable, disable, delete,
 * trigger, backfill; `docket template ...`) come with the sys partition.
 */
import type { Command } from 'commander';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseIsoTime, parsePositiveInteger } from './options.js';
import { table, writeJson, writeOut } from './render.js';
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

export function registerScheduleCommands(program: Command): void {
  const schedule = program.command('schedule').description('cron schedules (today: preview fire times with `schedule next`)');
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
