/** The derived ids of scheduled jobs: stable per (schedule, tick) and per (schedule, trigger command), distinct otherwise, one subject token. */
import { describe, expect, test } from 'vitest';
import { scheduledJobId, triggeredJobId } from '../src/ids.js';
import { ID_TOKEN } from '../src/nats/subjects.js';

describe('scheduled job ids', () => {
  test('the same (schedule, tick) gives the same id; another tick, schedule or kind another', () => {
    const a = scheduledJobId('nightly', '2030-01-01T02:00:00.000Z');
    expect(scheduledJobId('nightly', '2030-01-01T02:00:00.000Z')).toBe(a);
    const others = [
      scheduledJobId('nightly', '2030-01-02T02:00:00.000Z'),
      scheduledJobId('hourly', '2030-01-01T02:00:00.000Z'),
      triggeredJobId('nightly', '2030-01-01T02:00:00.000Z'),
    ];
    expect(new Set([a, ...others]).size).toBe(4);
    for (const id of [a, ...others]) expect(id).toMatch(ID_TOKEN);
    expect(triggeredJobId('nightly', 'cmd-1')).toBe(triggeredJobId('nightly', 'cmd-1'));
    expect(a.startsWith('s')).toBe(true);
  });
});
