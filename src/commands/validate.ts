/** Turns a request body into a typed command or an InvalidRequestError naming the field. */
import type { z } from 'zod';
import { InvalidRequestError } from '../errors.js';
import { submitBatchSchema, submitOneSchema, type JobSpec } from './schemas.js';

export function parseJson(data: Uint8Array): unknown {
  const text = new TextDecoder().decode(data);
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new InvalidRequestError('request body is not valid JSON', { cause: err });
  }
}

function describeIssues(issues: readonly z.core.$ZodIssue[]): string {
  return issues
    .slice(0, 5)
    .map((issue) => {
      const path = issue.path.length > 0 ? issue.path.join('.') : '(request)';
      if (issue.code === 'unrecognized_keys') return `unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => (path === '(request)' ? k : `${path}.${k}`)).join(', ')}`;
      return `${path}: ${issue.message}`;
    })
    .join('; ');
}

export function validate<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const result = schema.safeParse(value);
  if (!result.success) {
    throw new InvalidRequestError(describeIssues(result.error.issues), {
      details: { issues: result.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) },
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
  if (value !== null && typeof value === 'object' && 'jobs' in value) {
    const batch = validate(submitBatchSchema, value);
    return { id: batch.id, jobs: batch.jobs, batch: true };
  }
  return validate(submitOneSchema, value);
}
