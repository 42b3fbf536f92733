/**
 * Validators of the template and schedule commands (docket.cmd.template.* and schedule.*), and
 * the TypeScript types of their bodies. Unknown fields are refused. A cron is checked by croner
 * (its message quoted), a time zone by the runtime's IANA database, times as ISO-8601 with an
 * offset. What needs the stored schedule (a backfill's tick count) is `checkBackfill`.
 * The JSON Schemas of these bodies are generated in json-schemas.ts.
 */
import { z } from 'zod';
import { CatchupPolicies, OverlapPolicies, Priority, type ScheduleSpec, type TimingSpec } from '../../machines/index.js';
import { canonicalTimeZone, cronProblem, ticksAfter } from '../../machines/schedule-timing.js';
import { InvalidRequestError } from '../errors.js';
import { Limits, ScheduleDefaults } from './limits.js';
import { aggregateName, backoffSchema, commandId, jsonBytesAtMost, jsonObject, queueName } from './schemas.js';

const params = jsonObject.refine((p) => jsonBytesAtMost(p, Limits.MaxParamsBytes), { message: `must be at most ${Limits.MaxParamsBytes} bytes of JSON` });

/** A template's or schedule's name: its aggregate id, one subject token. */
export const scheduleName = aggregateName;
const isoTime = z.iso.datetime({ offset: true });
const note = z.string().max(Limits.MaxNoteChars);

/** A cron of 5 fields, or 6 with seconds first; refused with croner's reason. */
export const cronExpression = z
  .string()
  .min(1)
  .max(Limits.MaxCronChars)
  .superRefine((cron, ctx) => {
    const problem = cronProblem(cron);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: `invalid cron: ${problem}` });
  });

export const timeZone = z
  .string()
  .min(1)
  .max(64)
  .refine((tz) => canonicalTimeZone(tz) !== null, { message: 'unknown time zone: give an IANA name such as UTC, Europe/Berlin or America/New_York' });

// --- templates ---------------------------------------------------------------------------------

export const templatePutSchema = z
  .object({
    id: commandId.optional(),
    name: scheduleName,
    queue: queueName,
    params: params.optional(),
    priority: z.number().int().min(Priority.Min).max(Priority.Max).optional(),
    max_attempts: z.number().int().min(1).max(Limits.MaxAttempts).optional(),
    backoff: backoffSchema.optional(),
    lease_ms: z.number().int().min(Limits.MinLeaseMs).max(Limits.MaxLeaseMs).optional(),
    description: note.optional(),
  })
  .strict();
export const templateArchiveSchema = z.object({ id: commandId.optional(), name: scheduleName }).strict();

// --- schedules ---------------------------------------------------------------------------------

/** A schedule's own job (instead of a template): the submit fields that make sense per fire. */
export const scheduleJobSchema = z
  .object({
    queue: queueName,
    params: params.optional(),
    priority: z.number().int().min(Priority.Min).max(Priority.Max).optional(),
    max_attempts: z.number().int().min(1).max(Limits.MaxAttempts).optional(),
    backoff: backoffSchema.optional(),
  })
  .strict();

export const schedulePutSchema = z
  .object({
    id: commandId.optional(),
    name: scheduleName,
    template: scheduleName.describe("the template its jobs are made from (give template or job, not both)").optional(),
    job: scheduleJobSchema.describe('the job each fire submits, when no template is named').optional(),
    cron: cronExpression,
    timezone: timeZone.describe(`IANA time zone the cron is read in (default ${ScheduleDefaults.timezone})`).optional(),
    start_at: isoTime.describe('no tick before this time (inclusive)').optional(),
    end_at: isoTime.describe('no tick at or after this time (exclusive)').optional(),
    jitter_ms: z.number().int().min(0).max(Limits.MaxScheduleJitterMs).optional(),
    catchup: z.enum(CatchupPolicies).describe(`after downtime (default ${ScheduleDefaults.catchup})`).optional(),
    catchup_window_ms: z.number().int().min(0).max(Limits.MaxCatchupWindowMs).optional(),
    overlap: z.enum(OverlapPolicies).describe(`while the previous fire's job is live (default ${ScheduleDefaults.overlap})`).optional(),
    params: params.describe("merged over the template's (or the job's) params, shallow by key").optional(),
    paused: z.boolean().describe('true: disabled after the put; omitted: a new schedule is enabled, an existing one keeps its state').optional(),
    note: note.optional(),
  })
  .strict()
  .refine((s) => (s.template === undefined) !== (s.job === undefined), { message: 'give template or job, exactly one', path: ['template'] })
  .refine((s) => s.start_at === undefined || s.end_at === undefined || Date.parse(s.end_at) > Date.parse(s.start_at), { message: 'must be after start_at', path: ['end_at'] });

const byName = z.object({ id: commandId.optional(), name: scheduleName }).strict();
export const scheduleEnableSchema = byName;
export const scheduleDisableSchema = z.object({ id: commandId.optional(), name: scheduleName, note: note.optional() }).strict();
export const scheduleDeleteSchema = byName;
/** Fire now, outside the cron: the job id derives from the command id, so a resent trigger fires once. */
export const scheduleTriggerSchema = byName;
export const scheduleBackfillSchema = z
  .object({ id: commandId.optional(), name: scheduleName, from: isoTime.describe('first tick (inclusive)'), to: isoTime.describe('last tick (inclusive); not after now') })
  .strict()
  .refine((b) => Date.parse(b.to) >= Date.parse(b.from), { message: 'must not be before from', path: ['to'] })
  .refine((b) => Date.parse(b.to) - Date.parse(b.from) <= Limits.MaxBackfillRangeMs, { message: `the range must span at most ${Limits.MaxBackfillRangeMs} ms (366 days)`, path: ['to'] });
export const schedulePreviewSchema = z
  .object({
    cron: cronExpression,
    timezone: timeZone.optional(),
    from: isoTime.describe('list the fire times after this time (default: now)').optional(),
    count: z.number().int().min(1).max(Limits.MaxPreviewCount).describe(`how many (default ${Limits.DefaultPreviewCount})`).optional(),
  })
  .strict();

// --- reads (any node, from its folded state) ----------------------------------------------------

export const templateGetSchema = z.object({ name: scheduleName }).strict();
export const templateListSchema = z.object({}).strict();
export const scheduleGetSchema = z.object({ name: scheduleName }).strict();
export const scheduleListSchema = z
  .object({ status: z.enum(['enabled', 'disabled', 'deleted']).describe('only schedules in this state (default: all but deleted)').optional() })
  .strict();

export type TemplatePutCommand = z.infer<typeof templatePutSchema>;
export type TemplateArchiveCommand = z.infer<typeof templateArchiveSchema>;
export type SchedulePutCommand = z.infer<typeof schedulePutSchema>;
export type ScheduleDisableCommand = z.infer<typeof scheduleDisableSchema>;
export type ScheduleByNameCommand = z.infer<typeof byName>;
export type ScheduleBackfillCommand = z.infer<typeof scheduleBackfillSchema>;
export type SchedulePreviewCommand = z.infer<typeof schedulePreviewSchema>;
export type ScheduleListCommand = z.infer<typeof scheduleListSchema>;

/** Schedule and template commands by subject suffix (docket.cmd.<verb>), for the JSON Schemas. */
export const scheduleCommandSchemas = {
  'template.put': templatePutSchema,
  'template.archive': templateArchiveSchema,
  'schedule.put': schedulePutSchema,
  'schedule.enable': scheduleEnableSchema,
  'schedule.disable': scheduleDisableSchema,
  'schedule.delete': scheduleDeleteSchema,
  'schedule.trigger': scheduleTriggerSchema,
  'schedule.backfill': scheduleBackfillSchema,
  'schedule.preview': schedulePreviewSchema,
  'template.get': templateGetSchema,
  'template.list': templateListSchema,
  'schedule.get': scheduleGetSchema,
  'schedule.list': scheduleListSchema,
} as const;

/**
 * The spec a schedule.put event records: defaults filled in, the zone's canonical name. `paused`
 * is resolved by the caller (omitted: kept for an existing schedule, false for a new one).
 */
export function resolveScheduleSpec(command: SchedulePutCommand): ScheduleSpec {
  return {
    template: command.template ?? null,
    job: (command.job ?? null) as ScheduleSpec['job'],
    cron: command.cron.trim(),
    timezone: canonicalTimeZone(command.timezone ?? ScheduleDefaults.timezone) ?? ScheduleDefaults.timezone,
    start_at: command.start_at === undefined ? null : new Date(command.start_at).toISOString(),
    end_at: command.end_at === undefined ? null : new Date(command.end_at).toISOString(),
    jitter_ms: command.jitter_ms ?? ScheduleDefaults.jitterMs,
    catchup: command.catchup ?? ScheduleDefaults.catchup,
    catchup_window_ms: command.catchup_window_ms ?? null,
    overlap: command.overlap ?? ScheduleDefaults.overlap,
    params: (command.params ?? null) as ScheduleSpec['params'],
    note: command.note ?? null,
  };
}

/**
 * A backfill against the schedule's spec: the ticks in [from, to] (at most MaxBackfillTicks, and
 * `to` not after `now`), as ISO ticks. Refused with `invalid_request` naming the field.
 */
export function checkBackfill(spec: TimingSpec, command: ScheduleBackfillCommand, now: number): string[] {
  const from = Date.parse(command.from);
  const to = Date.parse(command.to);
  if (to > now) throw new InvalidRequestError('to: must not be in the future (the cron fires those ticks)', { details: { issues: [{ path: 'to', message: 'must not be in the future' }] } });
  const ticks: string[] = [];
  for (const tick of ticksAfter(spec, from - 1)) {
    if (tick > to) break;
    if (ticks.length >= Limits.MaxBackfillTicks) {
      throw new InvalidRequestError(`to: the range holds more than ${Limits.MaxBackfillTicks} ticks of this schedule; backfill it in parts`, {
        details: { issues: [{ path: 'to', message: `more than ${Limits.MaxBackfillTicks} ticks` }] },
      });
    }
    ticks.push(new Date(tick).toISOString());
  }
  return ticks;
}
