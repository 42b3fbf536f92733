/**
 * Validators of the job set commands (issue 14): `docket.cmd.jobset.put` and
 * `docket.cmd.refresh`, and of the key sources they name. Unknown fields are refused, as
 * everywhere (schemas.ts). The key source a body names is checked here for its form only; that
 * the database answers, the command runs or the file exists is found when it is read.
 */
import { z } from 'zod';
import { Priority } from '../../machines/index.js';
import { commandId, jsonBytesAtMost, queueName } from './schemas.js';
import { Limits } from './limits.js';

/** The URL schemes a key source may name, by driver. */
export const DatabaseSchemes = {
  'postgres:': 'pg',
  'postgresql:': 'pg',
  'mysql:': 'mysql',
  'mariadb:': 'mysql',
} as const;
export type DatabaseDriver = (typeof DatabaseSchemes)[keyof typeof DatabaseSchemes];

/**
 * Why a database URL is refused, or undefined. A password in the URL is refused rather than
 * stripped: the job set is stored in the log, which keeps everything forever and is readable by
 * anyone who can read the stream, so a password must never reach it, and silently dropping it
 * would leave a source that fails later for a reason the user cannot see.
 */
export function databaseUrlProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be a URL such as postgres://user@host:5432/db or mysql://user@host:3306/db';
  }
  if (!Object.hasOwn(DatabaseSchemes, url.protocol)) return `must start with postgres://, postgresql://, mysql:// or mariadb:// (not ${url.protocol}//)`;
  if (url.password !== '') return 'must not hold a password (it would be stored in the log): give password_env, the name of the environment variable every node reads the password from';
  if (url.hostname === '') return 'must name a host';
  return undefined;
}

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)');
const timeoutMs = z.number().int().min(1_000).max(Limits.MaxKeySourceTimeoutMs);
const bytesAtMost = (max: number) => (v: string) => Buffer.byteLength(v) <= max;

export const keyAttributeName = z.string().min(1).max(64).regex(/^(?!__proto__$|constructor$|prototype$)/, 'is a reserved name');
const keyScalar = z.union([z.string(), z.number(), z.boolean(), z.null()]);
/** A key as JSON: an object of scalar attributes, at most Limits.MaxKeyBytes of JSON. */
export const keyObjectSchema = z
  .record(keyAttributeName, keyScalar)
  .refine((k) => Object.keys(k).length > 0, { message: 'must have at least one attribute' })
  .refine((k) => jsonBytesAtMost(k, Limits.MaxKeyBytes), { message: `must be at most ${Limits.MaxKeyBytes} bytes of JSON` });

export const sqlSourceSchema = z
  .object({
    url: z.string().max(2_048).superRefine((url, ctx) => {
      const problem = databaseUrlProblem(url);
      if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
    }),
    sql: z.string().min(1).refine(bytesAtMost(Limits.MaxSourceSqlBytes), { message: `must be at most ${Limits.MaxSourceSqlBytes} bytes` }),
    password_env: envName.optional(),
    timeout_ms: timeoutMs.optional(),
  })
  .strict();
export const commandSourceSchema = z
  .object({
    command: z
      .array(z.string().min(1).refine(bytesAtMost(Limits.MaxCommandArgBytes), { message: `must be at most ${Limits.MaxCommandArgBytes} bytes` }))
      .min(1)
      .max(Limits.MaxCommandArgs),
    timeout_ms: timeoutMs.optional(),
  })
  .strict();
export const fileSourceSchema = z.object({ file: z.string().min(1).max(4_096) }).strict();
export const inlineSourceSchema = z.object({ keys: z.array(keyObjectSchema).max(Limits.MaxInlineKeys) }).strict();

export type SqlSourceSpec = z.infer<typeof sqlSourceSchema>;
export type CommandSourceSpec = z.infer<typeof commandSourceSchema>;
export type FileSourceSpec = z.infer<typeof fileSourceSchema>;
export type InlineSourceSpec = z.infer<typeof inlineSourceSchema>;
export type KeySourceSpec = SqlSourceSpec | CommandSourceSpec | FileSourceSpec | InlineSourceSpec;

const KEY_SOURCE_FORMS = 'must be one of {url, sql, password_env?, timeout_ms?}, {command: [argv...], timeout_ms?}, {file: path} or {keys: [...]}';

/** The form a key source body takes, by the field that names it; each form is checked on its own so its errors name its fields. */
function formOf(value: unknown): z.ZodType<KeySourceSpec> | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  if (Object.hasOwn(value, 'url') || Object.hasOwn(value, 'sql')) return sqlSourceSchema;
  if (Object.hasOwn(value, 'command')) return commandSourceSchema;
  if (Object.hasOwn(value, 'file')) return fileSourceSchema;
  if (Object.hasOwn(value, 'keys')) return inlineSourceSchema;
  return undefined;
}

/** A key source or target: one of the four forms (the JSON Schema says anyOf, json-schemas.ts). */
export const keySourceSchema = z.unknown().transform((value, ctx): KeySourceSpec => {
  const form = formOf(value);
  if (form === undefined) {
    ctx.addIssue({ code: 'custom', message: KEY_SOURCE_FORMS });
    return z.NEVER;
  }
  const parsed = form.safeParse(value);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) ctx.addIssue({ ...issue, code: 'custom', message: issue.message, path: issue.path });
    return z.NEVER;
  }
  return parsed.data;
});

const timeoutS = z.number().int().min(0).max(Limits.MaxJobSetTimeoutS);
const priority = z.number().int().min(Priority.Min).max(Priority.Max);

/**
 * docket.cmd.jobset.put: make the queue a job set, or replace its settings. A setting left out is
 * not set, so docket's default applies (precedence: src/jobsets/settings.ts).
 */
export const jobSetPutSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    key_source: keySourceSchema,
    target: keySourceSchema.optional(),
    attributes: z.array(keyAttributeName).min(1).max(Limits.MaxKeyAttributes).refine((a) => new Set(a).size === a.length, { message: 'must not repeat an attribute' }).optional(),
    keep_completed: z.boolean().optional(),
    stale_timeout_s: timeoutS.describe('0 skips stale cleanup').optional(),
    auto_refresh: z.boolean().optional(),
    default_priority: priority.optional(),
    version: z.string().min(1).max(255).describe('recorded on every run\'s error record; "git" records the worker\'s git hash').optional(),
  })
  .strict();
export type JobSetPutCommand = z.infer<typeof jobSetPutSchema>;
/** A job set's settings as stored (the command without its id). */
export type JobSetSettings = Omit<JobSetPutCommand, 'id'>;

const restrictionTerm = z.record(keyAttributeName, z.union([z.string(), z.number(), z.boolean(), z.null()]));
/** One object (AND of attribute values) or a list of them (OR): src/jobsets/restrict.ts. */
export const restrictionSchema = z.union([restrictionTerm, z.array(restrictionTerm).max(Limits.MaxRestrictTerms)]);

/** docket.cmd.refresh: seed 000's `jobs.refresh(*restrictions, delay, priority, stale_timeout, orphan_timeout)`. */
export const refreshSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    restrict: restrictionSchema.optional(),
    delay_ms: z.number().int().min(0).max(Limits.MaxDelayMs).optional(),
    priority: priority.optional(),
    stale_timeout_s: timeoutS.describe('0 skips stale cleanup').optional(),
    orphan_timeout_s: z
      .number()
      .int()
      .min(1, { message: 'must be at least 1 (leave it out for no orphan cleanup)' })
      .max(Limits.MaxJobSetTimeoutS)
      .optional(),
  })
  .strict();
export type RefreshCommand = z.infer<typeof refreshSchema>;

/** docket.cmd.jobset.show: the job set's definition and progress; `remaining: false` skips reading its sources. */
export const jobSetShowSchema = z
  .object({
    queue: queueName,
    remaining: z.boolean().describe('count the source keys not in the target (reads both sources); default true').optional(),
  })
  .strict();
export type JobSetShowCommand = z.infer<typeof jobSetShowSchema>;

/** docket.cmd.ignore: seed 000's `jobs.ignore(key)`, also for a key that has no job yet. */
export const ignoreSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    key: keyObjectSchema,
    reason: z.string().max(1_000).optional(),
  })
  .strict();
export type IgnoreCommand = z.infer<typeof ignoreSchema>;

/** Seed 000's statuses a delete may name (a reserved job is held by its run: cancel it first). */
export const DELETABLE_STATUSES = ['pending', 'success', 'error', 'ignore'] as const;

/** docket.cmd.delete: seed 000's `(jobs & condition).delete()`: a key, a status, a restriction, or several (AND). */
export const deleteSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    key: keyObjectSchema.optional(),
    status: z.enum(DELETABLE_STATUSES).optional(),
    restrict: restrictionSchema.optional(),
  })
  .strict()
  .refine((c) => c.key !== undefined || c.status !== undefined || c.restrict !== undefined, { message: 'give key, status or restrict (a delete of every job must say what it means)' });
export type DeleteCommand = z.infer<typeof deleteSchema>;

/** Commands by subject suffix, as schemas.ts's commandSchemas (for the service and the JSON Schemas). */
export const jobSetCommandSchemas = {
  'jobset.put': jobSetPutSchema,
  refresh: refreshSchema,
  'jobset.show': jobSetShowSchema,
  ignore: ignoreSchema,
  delete: deleteSchema,
} as const;
