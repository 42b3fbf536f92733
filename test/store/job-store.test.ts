/**
 * The job store keeps a plain submit's event id (e<job id>) implicitly; what it answers about the
 * history must not depend on that.
 */
import { describe, expect, test } from 'vitest';
import { historyOf, holdsEvent, JobStore, plainSubmitId, submitIdOf } from '../../src/store/job-store.js';
import { QUEUE, jobEvent, at } from '../support/arbitraries.js';

function submitted(jobId: string, eventId: string) {
  const event = jobEvent('job.submitted', {
    job_id: jobId, key: null, params: {}, priority: 5, position: null, run_at: at(0), max_attempts: 1,
    backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 }, attempt: 1, retry_of: null, waiting: false,
  });
  return { ...event, id: eventId };
}

describe('job store: the submit event id', () => {
  test.each([
    ['a plain submit (e<job id>): not held, derived', 'j-plain', plainSubmitId('j-plain'), null],
    ['a command submit (another id): held as is', 'j-cmd', 'eCommandDerived123', 'eCommandDerived123'],
  ])('%s', (_name, jobId, eventId, stored) => {
    const store = new JobStore();
    expect(store.apply({ seq: 7, queue: QUEUE, jobId, event: submitted(jobId, eventId) })).toBe('applied');
    const record = store.get(jobId)!;
    expect(record.submitId).toBe(stored);
    expect(submitIdOf(record)).toBe(eventId);
    expect(historyOf(record)).toEqual([{ seq: 7, id: eventId, type: 'job.submitted', time: at(0) }]);
    expect(holdsEvent(record, eventId)).toBe(true);
    expect(holdsEvent(record, `${eventId}x`)).toBe(false);
    expect(holdsEvent(record, plainSubmitId(`${jobId}x`))).toBe(false);
  });
});
