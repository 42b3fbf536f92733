// The package's public entry resolves by its own name, as the README's SDK example imports it.
import { expect, test } from 'vitest';
import { Client, ErrorCodes, ManualClock, NonRetryableJobError, startNode, Worker } from 'docket';

test('the public entry exports the SDK, the node and the errors', () => {
  expect(typeof Client.connect).toBe('function');
  expect(typeof startNode).toBe('function');
  expect(new Worker({ queue: 'q', handler: () => null }).id).toMatch(/.+/);
  expect(new NonRetryableJobError('x')).toBeInstanceOf(Error);
  expect(Object.values(ErrorCodes)).toEqual(['invalid_request', 'not_found', 'invalid_transition', 'conflict', 'stale_run', 'paused', 'unavailable']);
  expect(new ManualClock(5).now()).toBe(5);
});
