/**
 * docket.cmd.schedule.preview: the next fire times of a cron in a time zone, so a user sees what
 * a spec means before saving it. Reads nothing from the log: any node answers at once.
 * Reply: `{ times: [ISO-8601 UTC, ...], timezone }` (the zone's canonical IANA name).
 */
import { canonicalTimeZone, nextTicks } from '../../machines/schedule-timing.js';
import type { Clock } from '../clock.js';
import { Limits, ScheduleDefaults } from '../commands/limits.js';
import { schedulePreviewSchema } from '../commands/schedule-schemas.js';
import { validate } from '../commands/validate.js';

export interface SchedulePreviewReply {
  readonly times: string[];
  readonly timezone: string;
}

/** The next `count` ticks of `cron` after `from` (default: the clock's now). */
export function previewSchedule(clock: Clock, body: unknown): SchedulePreviewReply {
  const command = validate(schedulePreviewSchema, body);
  const timezone = canonicalTimeZone(command.timezone ?? ScheduleDefaults.timezone) ?? ScheduleDefaults.timezone;
  const from = command.from === undefined ? clock.now() : Date.parse(command.from);
  return { times: nextTicks({ cron: command.cron.trim(), timezone }, from, command.count ?? Limits.DefaultPreviewCount), timezone };
}
