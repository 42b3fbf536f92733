/**
 * The key index's table by values (src/jobsets/key-table.ts) answers exactly what a Map by
 * identity (keyIdentity, canonical JSON) answers, for the keys a source yields: flat objects of
 * strings, finite numbers and null, looked up in any attribute order, among held keys that may
 * also be booleans, -0, strings or nested JSON (hand-submitted keys), past the table's growth.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { keyIdentity, type Key } from '../../src/jobsets/key.js';
import { KeyTable } from '../../src/jobsets/key-table.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

/** Few names and values, so that generated keys often share some attributes and values. */
const name = fc.constantFrom('a', 'b', 'subject_id', 'session_id', '2', '10', 'ä');
const scalar = fc.oneof(fc.integer({ min: -3, max: 3 }), fc.constantFrom(0.5, 1e21, -(2 ** 53), 2 ** 31, 'x', '1', '', 'ä', null));
/** A source key: distinct names, scalar values, the order as generated. */
const sourceKey = fc.uniqueArray(fc.tuple(name, scalar), { minLength: 1, maxLength: 4, selector: ([n]) => n }).map((entries) => Object.fromEntries(entries) as Key);
/** A held key: a source key, or one a hand submit may hold and no source key equals. */
const heldKey = fc.oneof(
  { weight: 4, arbitrary: sourceKey },
  { weight: 1, arbitrary: fc.constantFrom<unknown>({ a: true }, { a: 1, b: { c: 1 } }, { a: [1] }, 'a', { a: -0 }, {}) },
);

/** The same key with its attributes in reverse order: the same identity. */
const reversed = (key: Key): Key => Object.fromEntries(Object.entries(key).reverse());

describe('KeyTable', () => {
  fcTest.prop([fc.array(heldKey, { maxLength: 60 }), fc.array(sourceKey, { maxLength: 60 })], { numRuns })('finds a source key exactly when a held key has its identity', (held, probes) => {
    const table = new KeyTable();
    const byIdentity = new Map<string, number>();
    held.forEach((key, slot) => {
      const identity = keyIdentity(key);
      if (byIdentity.has(identity)) return; // one slot per identity, as the key index adds them
      byIdentity.set(identity, slot);
      table.add(key, slot);
    });
    for (const key of [...probes, ...held.filter((k): k is Key => typeof k === 'object' && k !== null && !Array.isArray(k))]) {
      const expected = byIdentity.get(keyIdentity(key)) ?? -1;
      // A held key that is not of a source's form is not found (no source key has its identity).
      const sourceForm = Object.values(key).every((v) => v === null || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)));
      if (!sourceForm || Object.keys(key).length === 0) continue;
      expect(table.slotOf(key)).toBe(expected);
      expect(table.slotOf(reversed(key))).toBe(expected);
      if (expected >= 0) expect(keyIdentity(table.keyAt(expected))).toBe(keyIdentity(key));
    }
  });

  test('-0 and 0 are one key; 1 and "1" and true are three; a held key with more attributes is another key', () => {
    const table = new KeyTable();
    table.add({ a: -0 }, 0);
    table.add({ a: true }, 1);
    table.add({ a: 1, b: 2 }, 2);
    expect(table.slotOf({ a: 0 })).toBe(0);
    expect(table.slotOf({ a: 1 })).toBe(-1);
    expect(table.slotOf({ a: '1' })).toBe(-1);
    expect(table.slotOf({ b: 2, a: 1 })).toBe(2);
    expect(table.slotOf({ a: 1, b: 2, c: null })).toBe(-1);
  });

  test('a hundred thousand keys: every one found in its slot after the table grew, and others not', () => {
    const table = new KeyTable();
    const n = 100_000;
    for (let i = 0; i < n; i++) table.add({ subject_id: Math.floor(i / 100), session_id: i % 100 }, i);
    let found = 0;
    for (let i = 0; i < n; i++) found += table.slotOf({ session_id: i % 100, subject_id: Math.floor(i / 100) }) === i ? 1 : 0;
    expect(found).toBe(n);
    expect(table.slotOf({ subject_id: n, session_id: 0 })).toBe(-1);
    expect(table.slotOf({ subject_id: 1, session_id: '1' })).toBe(-1);
  });
});
