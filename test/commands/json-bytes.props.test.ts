/**
 * The byte limits of params, keys and results (src/commands/schemas.ts jsonBytesAtMost) skip the
 * encoding when a bound says the value fits: the bound must never say so for a value that does not.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { expect, test } from 'vitest';
import { jsonBytesAtMost } from '../../src/commands/schemas.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 300);
const bytesOf = (v: unknown): number => Buffer.byteLength(JSON.stringify(v));
// Escapes and multi-byte characters are where a bound per character could be short.
const text = fc.string({ unit: fc.constantFrom('a', '"', '\\', '\n', '\u0001', 'é', '😀', '\ud800'), maxLength: 12 });
// The longest numbers JSON writes: 25 characters (17 digits after "-0.00000"), and the extremes.
const longNumber = fc.constantFrom(-(1e-6 + 2 ** -72), -0.0000012345678901234567, -Number.MAX_VALUE, -5e-324, -1.2345678901234567e-300, -123456789012345680000);
const jsonArb = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.constant(null), fc.boolean(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.integer(), longNumber, text, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.dictionary(text, tie('value'), { maxKeys: 4 }),
})).value;

// Limits at and around the value's own size, where a bound one byte short would answer wrong.
fcTest.prop([jsonArb, fc.integer({ min: -3, max: 3 })], { numRuns })('is exactly whether the JSON text fits in max bytes', (value, delta) => {
  const max = Math.max(0, bytesOf(value) + delta);
  expect(jsonBytesAtMost(value, max)).toBe(bytesOf(value) <= max);
});

test('an array of the longest numbers is measured, not passed by a bound short of their length', () => {
  const value = { v: new Array<number>(2_620).fill(-(1e-6 + 2 ** -72)) };
  expect(bytesOf(value)).toBeGreaterThan(65_536);
  expect(jsonBytesAtMost(value, 65_536)).toBe(false);
});
