/** Turns a request body into a typed command or an InvalidRequestError naming the field. */
import type { z } from 'zod';
import { excerpt, InvalidRequestError } from '../errors.js';
import { submitBatchSchema, submitOneSchema, type JobSpec } from './schemas.js';

/** Strict: a body that is not UTF-8 is refused, not read with U+FFFD in place of its bytes. */
const utf8 = new TextDecoder('utf-8', { fatal: true });

export function parseJson(data: Uint8Array): unknown {
  let text: string;
  try {
    text = utf8.decode(data);
  } catch (err) {
    throw new InvalidRequestError('request body is not valid UTF-8', { cause: err });
  }
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new InvalidRequestError('request body is not valid JSON', { cause: err });
  }
}

/** Issues quoted in a message and listed in details; a batch of 10,000 bad items says the first ones. */
const MAX_ISSUES_MESSAGE = 5;
const MAX_ISSUES_DETAILS = 20;
/** A field name or path segment is quoted up to this many characters. */
const MAX_NAME_CHARS = 64;

/** A path as `a.b.0.c`, each segment cut short: a key of a hostile body can be a megabyte long. */
function pathOf(path: readonly PropertyKey[]): string {
  return path.length === 0 ? '(request)' : path.map((p) => (typeof p === 'string' && p.length > MAX_NAME_CHARS ? `${p.slice(0, MAX_NAME_CHARS)}…` : String(p))).join('.');
}

/** A field name as written when it is a plain word, quoted (and cut short) when it is not. */
function nameOf(key: string): string {
  return /^[\w$-]{1,64}$/.test(key) ? key : excerpt(key, MAX_NAME_CHARS);
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = pathOf(issue.path);
  if (issue.code === 'unrecognized_keys') {
    const keys = issue.keys.slice(0, 3).map((k) => (issue.path.length === 0 ? nameOf(k) : `${path}.${nameOf(k)}`));
    return `unknown field${issue.keys.length > 1 ? 's' : ''} ${keys.join(', ')}${issue.keys.length > 3 ? ` and ${issue.keys.length - 3} more` : ''}`;
  }
  // zod's own messages quote expectations, not the input, except for unknown keys (above).
  return `${path}: ${issue.message}`;
}

/** An issue's message without its path (the details carry the path beside it). */
function issueMessage(issue: z.core.$ZodIssue): string {
  if (issue.code !== 'unrecognized_keys') return issue.message;
  const keys = issue.keys.slice(0, 3).map(nameOf);
  return `unknown field${issue.keys.length > 1 ? 's' : ''} ${keys.join(', ')}${issue.keys.length > 3 ? ` and ${issue.keys.length - 3} more` : ''}`;
}

/**
 * Command fields named like Object.prototype's own. JSON.parse makes `__proto__` an own key,
 * which zod copies by assignment (so it vanishes into the prototype of zod's output) and which
 * `in` checks would see on every object; refused here by own-key lookup, on every command.
 */
const RESERVED_KEYS = ['__proto__', 'constructor', 'prototype'] as const;

function reservedKeyIn(value: unknown): string | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  return RESERVED_KEYS.find((key) => Object.hasOwn(value, key));
}

/** The command's own fields and a batch's items' (`jobs[i]`), where a reserved key is refused. */
function refuseReservedKeys(value: unknown): void {
  const top = reservedKeyIn(value);
  if (top !== undefined) throw new InvalidRequestError(`unknown field ${top}`, { details: { issues: [{ path: top, message: 'unknown field' }] } });
  const jobs = value !== null && typeof value === 'object' && Object.hasOwn(value, 'jobs') ? (value as { jobs: unknown }).jobs : undefined;
  if (!Array.isArray(jobs)) return;
  for (const [i, item] of jobs.entries()) {
    const key = reservedKeyIn(item);
    if (key !== undefined) throw new InvalidRequestError(`unknown field jobs.${i}.${key}`, { details: { issues: [{ path: `jobs.${i}.${key}`, message: 'unknown field' }] } });
  }
}

/** The one door from a request body to a typed command: every command's body passes here. */
export function validate<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  refuseReservedKeys(value);
  const result = schema.safeParse(value);
  if (!result.success) {
    const { issues } = result.error;
    const more = issues.length > MAX_ISSUES_MESSAGE ? `; and ${issues.length - MAX_ISSUES_MESSAGE} more` : '';
    throw new InvalidRequestError(issues.slice(0, MAX_ISSUES_MESSAGE).map(describeIssue).join('; ') + more, {
      details: { issues: issues.slice(0, MAX_ISSUES_DETAILS).map((i) => ({ path: pathOf(i.path), message: issueMessage(i) })), ...(issues.length > MAX_ISSUES_DETAILS ? { issue_count: issues.length } : {}) },
    });
  }
  return result.data;
}

export interface SubmitCommand {
  readonly id: string | undefined;
  readonly jobs: readonly JobSpec[];
  readonly batch: boolean;
}

/** A submit is one job (`{queue,...}`) or a batch (`{jobs:[...]}`). */
export function validateSubmit(value: unknown): SubmitCommand {
  if (value !== null && typeof value === 'object' && Object.hasOwn(value, 'jobs')) {
    const batch = validate(submitBatchSchema, value);
    return { id: batch.id, jobs: batch.jobs, batch: true };
  }
  return validate(submitOneSchema, value);
}
