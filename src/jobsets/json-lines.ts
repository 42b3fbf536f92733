/** JSON lines (one key object per line), shared by the command and file sources. */
import { InvalidRequestError } from '../errors.js';
import { toKey, type Key } from './key.js';

/**
 * One line of JSON lines as a key, or undefined for a blank line. A number beyond 2^53 loses
 * digits in JSON.parse before docket sees it: such an attribute must be written as a string.
 */
export function keyFromJsonLine(line: string, origin: string, attributes: readonly string[] | undefined): Key | undefined {
  const text = line.trim();
  if (text === '') return undefined;
  let row: unknown;
  try {
    row = JSON.parse(text);
  } catch (err) {
    throw new InvalidRequestError(`key source ${origin}: not JSON (${(err as Error).message})`, { details: { source: origin } });
  }
  return toKey(row, origin, { attributes });
}
