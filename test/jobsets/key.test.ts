/**
 * The one normalisation of key values (src/jobsets/key.ts), the key's identity (the same job id
 * as a hand-submitted key), restrictions, precedence and the job set validators.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { InvalidRequestError } from '../../src/errors.js';
import { canonicalJson, keyedJobId } from '../../src/ids.js';
import { decimalFromText, integerFromText, keyIdentity, normaliseValue, timestampFromText, toKey } from '../../src/jobsets/key.js';
import { matchesRestriction } from '../../src/jobsets/restrict.js';
import { firstGiven, resolvePopulateSettings, resolveRefreshSettings } from '../../src/jobsets/settings.js';
import { jobSetPutSchema, refreshSchema } from '../../src/commands/jobset-schemas.js';
import { validate } from '../../src/commands/validate.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

describe('key values', () => {
  test('integers: numbers when safe, decimal text beyond 2^53', () => {
    expect(integerFromText('42')).toBe(42);
    expect(integerFromText('-0')).toBe(0);
    expect(integerFromText('9007199254740991')).toBe(9007199254740991);
    expect(integerFromText('9007199254740992')).toBe('9007199254740992');
    expect(integerFromText('-9223372036854775808')).toBe('-9223372036854775808');
    expect(normaliseValue(2n ** 60n, 'test', 'a')).toBe('1152921504606846976');
    expect(normaliseValue(7n, 'test', 'a')).toBe(7);
  });

  test('decimals: numbers when the value is a safe integer, else the text with its scale', () => {
    expect(decimalFromText('10.00')).toBe(10);
    expect(decimalFromText('-3')).toBe(-3);
    expect(decimalFromText('1.50')).toBe('1.50');
    expect(decimalFromText('99999999999999999999.00')).toBe('99999999999999999999.00');
  });

  test('timestamps: ISO-8601 UTC, milliseconds always, finer digits only when not zero; zone-less text is UTC', () => {
    expect(timestampFromText('2024-02-03 04:05:06')).toBe('2024-02-03T04:05:06.000Z');
    expect(timestampFromText('2024-02-03 04:05:06.120000')).toBe('2024-02-03T04:05:06.120Z');
    expect(timestampFromText('2024-02-03 04:05:06.123456')).toBe('2024-02-03T04:05:06.123456Z');
    expect(timestampFromText('2024-02-03 04:05:06+02')).toBe('2024-02-03T02:05:06.000Z');
    expect(timestampFromText('2024-02-03 04:05:06.5-05:30')).toBe('2024-02-03T09:35:06.500Z');
    expect(timestampFromText('infinity')).toBe('infinity');
    expect(normaliseValue(new Date('2024-02-03T04:05:06.789Z'), 'test', 'a')).toBe('2024-02-03T04:05:06.789Z');
  });

  test('booleans become 1/0, bytes lowercase hex, null stays, -0 is 0', () => {
    expect(normaliseValue(true, 't', 'a')).toBe(1);
    expect(normaliseValue(false, 't', 'a')).toBe(0);
    expect(normaliseValue(Buffer.from([0x0a, 0xff]), 't', 'a')).toBe('0aff');
    expect(normaliseValue(null, 't', 'a')).toBeNull();
    expect(Object.is(normaliseValue(-0, 't', 'a'), 0)).toBe(true);
  });

  test('objects, arrays and non-finite numbers are refused, naming the source and the attribute', () => {
    expect(() => normaliseValue({ x: 1 }, 'file k.jsonl line 2', 'meta')).toThrow(/file k.jsonl line 2: attribute "meta" is an object/);
    expect(() => normaliseValue([1], 'src', 'list')).toThrow(/attribute "list" is an array/);
    expect(() => normaliseValue(Number.NaN, 'src', 'n')).toThrow(InvalidRequestError);
  });
});

describe('keys', () => {
  test('a row is refused unless it is an object with attributes; declared attributes project and are required', () => {
    expect(() => toKey([1, 2], 'src')).toThrow(/a key must be a JSON object/);
    expect(() => toKey({}, 'src')).toThrow(/at least one attribute/);
    expect(toKey({ subject: 1, session: 2, notes: 'x' }, 'src', { attributes: ['subject', 'session'] })).toEqual({ subject: 1, session: 2 });
    expect(() => toKey({ subject: 1 }, 'postgres://h/db row 3', { attributes: ['subject', 'session'] })).toThrow(/postgres:\/\/h\/db row 3: the key lacks the attribute "session"/);
    expect(() => toKey({ big: 'x'.repeat(2000) }, 'src')).toThrow(/bytes of JSON, over the 1024 allowed/);
  });

  test("a key's identity is the canonical JSON a hand-submitted key's job id is derived from", () => {
    const fromSource = toKey({ session: 2, subject: 1 }, 'src');
    const byHand = { subject: 1, session: 2 };
    expect(keyIdentity(fromSource)).toBe(canonicalJson(byHand));
    expect(keyedJobId('q', keyIdentity(fromSource), 0)).toBe(keyedJobId('q', canonicalJson(byHand), 0));
  });

  fcTest.prop([fc.dictionary(fc.string({ minLength: 1, maxLength: 8 }).filter((k) => !['__proto__', 'constructor', 'prototype'].includes(k)), fc.oneof(fc.integer(), fc.string({ maxLength: 10 }), fc.constant(null)), { minKeys: 1, maxKeys: 6 })], { numRuns })(
    'normalising a normalised key changes nothing, and attribute order never changes its identity',
    (row) => {
      const key = toKey(row, 'src');
      expect(toKey(key, 'src')).toEqual(key);
      const reversed = Object.fromEntries(Object.entries(row).reverse());
      expect(keyIdentity(toKey(reversed, 'src'))).toBe(keyIdentity(key));
    },
  );
});

describe('keyIdentity', () => {
  const anyName = fc.oneof(fc.string({ maxLength: 6 }), fc.string({ unit: 'grapheme', maxLength: 4 }), fc.constantFrom('1', '10', '2', 'a', 'B', '_', '\u00e9', 'ü'));
  fcTest.prop([fc.oneof(fc.dictionary(anyName, fc.oneof(fc.integer(), fc.double(), fc.string({ maxLength: 6 }), fc.boolean(), fc.constant(null)), { maxKeys: 6 }), fc.jsonValue({ maxDepth: 3 }))], { numRuns: numRuns * 5 })(
    'is exactly canonicalJson (the text keyed job ids are derived from), for keys and any other JSON',
    (value) => {
      expect(keyIdentity(value)).toBe(canonicalJson(value));
    },
  );
});

describe('restrict', () => {
  test('an object is AND, a list is OR, an attribute the key lacks does not match', () => {
    const key = { lab: 'smith', id: 3 };
    expect(matchesRestriction(key, undefined)).toBe(true);
    expect(matchesRestriction(key, { lab: 'smith' })).toBe(true);
    expect(matchesRestriction(key, { lab: 'smith', id: 4 })).toBe(false);
    expect(matchesRestriction(key, [{ id: 4 }, { id: 3 }])).toBe(true);
    expect(matchesRestriction(key, [])).toBe(false);
    expect(matchesRestriction(key, { lba: 'smith' })).toBe(false);
    expect(matchesRestriction(key, { id: '3' })).toBe(false);
  });
});

describe('precedence: command > job set > default', () => {
  test('a given value wins even when falsy; a missing one falls through', () => {
    expect(firstGiven(0, 7, 5)).toBe(0);
    expect(firstGiven(undefined, 7, 5)).toBe(7);
    expect(firstGiven(undefined, undefined, 5)).toBe(5);
  });

  test('refresh settings', () => {
    expect(resolveRefreshSettings({})).toEqual({ keepCompleted: false, staleTimeoutS: 3600, orphanTimeoutS: null, priority: 5, delayMs: 0 });
    expect(resolveRefreshSettings({}, { default_priority: 2, stale_timeout_s: 60, keep_completed: true })).toEqual({ keepCompleted: true, staleTimeoutS: 60, orphanTimeoutS: null, priority: 2, delayMs: 0 });
    expect(resolveRefreshSettings({ priority: 0, stale_timeout_s: 0, orphan_timeout_s: 30, delay_ms: 1000 }, { default_priority: 2, stale_timeout_s: 60 })).toEqual({
      keepCompleted: false,
      staleTimeoutS: 0,
      orphanTimeoutS: 30,
      priority: 0,
      delayMs: 1000,
    });
  });

  test('populate settings', () => {
    expect(resolvePopulateSettings({})).toEqual({ refresh: true, maxPriority: null });
    expect(resolvePopulateSettings({}, { auto_refresh: false })).toEqual({ refresh: false, maxPriority: null });
    expect(resolvePopulateSettings({ refresh: true, priority: 3 }, { auto_refresh: false })).toEqual({ refresh: true, maxPriority: 3 });
  });
});

describe('jobset.put and refresh validators', () => {
  const put = (body: unknown) => validate(jobSetPutSchema, body);
  const message = (fn: () => unknown): string => {
    try {
      fn();
    } catch (err) {
      expect(err).toBeInstanceOf(InvalidRequestError);
      return (err as Error).message;
    }
    throw new Error('expected a refusal');
  };

  test('each key source form is accepted', () => {
    for (const key_source of [
      { url: 'postgres://app@db.example:5432/lab', sql: 'SELECT subject_id FROM subject', password_env: 'LAB_DB_PASSWORD' },
      { url: 'mysql://root@127.0.0.1:3306/test', sql: 'SELECT 1 AS a', timeout_ms: 5000 },
      { command: ['python3', 'keys.py', '--all'] },
      { file: '/data/keys.jsonl' },
      { keys: [{ subject_id: 1 }, { subject_id: 2, flag: true }] },
    ]) {
      expect(put({ queue: 'sessions', key_source }).key_source).toEqual(key_source);
    }
  });

  test('a URL holding a password is refused, pointing at password_env', () => {
    expect(message(() => put({ queue: 'q', key_source: { url: 'postgres://app:secret@db/lab', sql: 'SELECT 1' } }))).toMatch(/key_source\.url: must not hold a password.*password_env/);
  });

  test('errors name the form and the field', () => {
    expect(message(() => put({ queue: 'q', key_source: { query: 'SELECT 1' } }))).toMatch(/key_source: must be one of/);
    expect(message(() => put({ queue: 'q', key_source: { url: 'http://x/y', sql: 'SELECT 1' } }))).toMatch(/key_source\.url: must start with postgres/);
    expect(message(() => put({ queue: 'q', key_source: { command: [] } }))).toMatch(/key_source\.command/);
    expect(message(() => put({ queue: 'q', key_source: { keys: [{ a: { nested: 1 } }] } }))).toMatch(/key_source\.keys\.0/);
    expect(message(() => put({ queue: 'q', key_source: { file: 'k.jsonl' }, target: { file: 't.jsonl', extra: 1 } }))).toMatch(/target.*extra/);
    expect(message(() => put({ queue: 'q', key_source: { file: 'k' }, stale_timeout_s: -1 }))).toMatch(/stale_timeout_s/);
  });

  test('refresh: restrict is an object or a list; orphan_timeout_s is at least 1', () => {
    expect(validate(refreshSchema, { queue: 'q', restrict: [{ lab: 'smith' }, { id: 3 }], priority: 0 }).restrict).toEqual([{ lab: 'smith' }, { id: 3 }]);
    expect(message(() => validate(refreshSchema, { queue: 'q', orphan_timeout_s: 0 }))).toMatch(/leave it out for no orphan cleanup/);
    expect(message(() => validate(refreshSchema, { queue: 'q', priority: 256 }))).toMatch(/priority/);
  });
});
