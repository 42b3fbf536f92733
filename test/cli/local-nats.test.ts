/** The Go threads `docket up` gives a local nats-server (src/cli/local-nats.ts serverThreads). */
import { expect, test } from 'vitest';
import { serverThreads } from '../../src/cli/local-nats.js';

test('one Go thread on a machine of two cores or fewer, Go default above', () => {
  expect(serverThreads(1, {})).toBe('1');
  expect(serverThreads(2, {})).toBe('1');
  expect(serverThreads(3, {})).toBeUndefined();
  expect(serverThreads(16, {})).toBeUndefined();
});

test("the user's GOMAXPROCS is kept, on any machine", () => {
  expect(serverThreads(2, { GOMAXPROCS: '2' })).toBe('2');
  expect(serverThreads(16, { GOMAXPROCS: '4' })).toBe('4');
});

test('an empty GOMAXPROCS is unset, as Go reads it', () => {
  expect(serverThreads(2, { GOMAXPROCS: '' })).toBe('1');
  expect(serverThreads(16, { GOMAXPROCS: '' })).toBeUndefined();
});
