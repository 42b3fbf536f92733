/**
 * The byte limits of params, keys and results (src/commands/schemas.ts jsonBytesAtMost) skip the
 * encoding when a bound says the value fits: the bound must never say so for a value that does not.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { expect } from 'vitest';
import { jsonBytesAtMost } from '../../src/commands/schemas.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 300);
const bytesOf = (v: unknown): number => Buffer.byteLength(JSON.stringify(v));
// Escapes and multi-byte characters are where a bound per character could be short.
const text = fc.string({ unit: fc.constantFrom('a', '"', '\\', '\n', '\u0001', 'é', '😀', '\ud800'), maxLength: 12 });
const jsonArb = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.constant(null), fc.boolean(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.integer(), text, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.dictionary(text, tie('value'), { maxKeys: 4 }),
})).value;

fcTest.prop([jsonArb, fc.nat({ max: 400 })], { numRuns })('is exactly whether the JSON text fits in max bytes', (value, max) => {
  expect(jsonBytesAtMost(value, max)).toBe(bytesOf(value) <= max);
});
