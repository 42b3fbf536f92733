/**
 * Seed 000's error record of a failed job: `error_message` is a summary, the message's first
 * Limits.MaxErrorSummaryChars (2,047) characters, and `error_stack` holds the full text. Defined
 * once here: the leader stores a failure this way (endRun) and the views cut older, longer
 * messages the same way.
 */
import type { JobError } from '../../machines/index.js';
import { Limits } from './limits.js';

/** The first MaxErrorSummaryChars characters of `message`, never half a surrogate pair. */
export function errorSummary(message: string): string {
  if (message.length <= Limits.MaxErrorSummaryChars) return message;
  const cut = message.slice(0, Limits.MaxErrorSummaryChars);
  return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/**
 * The error a failed run stores: its message cut to the summary; a longer message is kept whole as
 * the stack when the worker sent no stack, so nothing the worker said is lost (both stay within
 * their byte bounds: the message was checked against MaxErrorMessageBytes, which equals
 * MaxErrorStackBytes).
 */
export function storedError(error: JobError): JobError {
  if (error.message.length <= Limits.MaxErrorSummaryChars) return error;
  return { ...error, message: errorSummary(error.message), stack: error.stack ?? error.message };
}
