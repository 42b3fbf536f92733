/**
 * The pure parts of the bulk commands: validation (one door, invalid_request naming the field)
 * and the bound on a reply's job ids.
 */
import { describe, expect, test } from 'vitest';
import { boundedIds, validateBulk } from '../../src/commands/bulk-commands.js';

describe('the reply of a bulk command', () => {
  test('job_ids are cut to what fits the budget, with truncated: true; all of them when they fit', () => {
    const ids = Array.from({ length: 1000 }, (_, i) => `job-${String(i).padStart(6, '0')}`);
    expect(boundedIds(ids, 1024 * 1024)).toEqual({ job_ids: ids });
    const cut = boundedIds(ids, 2048 + 100 * 13);
    expect(cut.truncated).toBe(true);
    expect(cut.job_ids).toEqual(ids.slice(0, 100));
    // The ids given, as JSON, stay within the budget left after the reply's other fields.
    expect(Buffer.byteLength(JSON.stringify(cut.job_ids))).toBeLessThanOrEqual(100 * 13 + 1);
    expect(boundedIds(ids, 0)).toEqual({ job_ids: [], truncated: true });
    expect(boundedIds([], 0)).toEqual({ job_ids: [] });
  });
});

describe('validateBulk', () => {
  test('takes each verb\'s body and refuses what does not fit it', () => {
    expect(validateBulk('retry_all', { queue: 'q', since: '2026-01-01T00:00:00Z', dry_run: true })).toEqual({ verb: 'retry_all', body: { queue: 'q', since: '2026-01-01T00:00:00Z', dry_run: true } });
    expect(validateBulk('cancel_all', { queue: 'q', status: 'delayed', id: 'c1' }).body).toEqual({ queue: 'q', status: 'delayed', id: 'c1' });
    expect(validateBulk('clean', { queue: 'q', status: 'ignored', older_than_ms: 0 }).body).toMatchObject({ older_than_ms: 0 });
    expect(() => validateBulk('cancel_all', { queue: 'q', status: 'succeeded' })).toThrow(/status/);
    expect(() => validateBulk('clean', { queue: 'q', status: 'succeeded', older_than_ms: -5 })).toThrow(/older_than_ms/);
    expect(() => validateBulk('clean', { queue: 'q', status: 'running', older_than_ms: 5 })).toThrow(/status/);
    expect(() => validateBulk('retry_all', { queue: 'q', dry_run: 'yes' })).toThrow(/dry_run/);
    expect(() => validateBulk('retry_all', JSON.parse('{"queue":"q","__proto__":{"x":1}}'))).toThrow(/unknown field __proto__/);
  });
});
