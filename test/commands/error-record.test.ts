/** Seed 000's error record: error_message is the first 2,047 characters, the full text stays (error_stack). */
import { describe, expect, test } from 'vitest';
import { errorSummary, storedError } from '../../src/commands/error-record.js';

describe('storedError', () => {
  test('a message of at most 2,047 characters is stored as it is', () => {
    const error = { message: 'y'.repeat(2047), retryable: true };
    expect(storedError(error)).toBe(error);
  });

  test('a longer message keeps its first 2,047 characters; without a stack the whole message becomes the stack', () => {
    const message = `${'a'.repeat(2047)}TAIL`;
    expect(storedError({ message, retryable: false })).toEqual({ message: 'a'.repeat(2047), stack: message, retryable: false });
  });

  test("a longer message with its own stack keeps the worker's stack", () => {
    expect(storedError({ message: 'b'.repeat(3000), stack: 'at make()' })).toEqual({ message: 'b'.repeat(2047), stack: 'at make()' });
  });

  test('the cut never leaves half a surrogate pair', () => {
    const summary = errorSummary(`${'c'.repeat(2046)}😀rest`);
    expect(summary).toBe('c'.repeat(2046));
  });
});
