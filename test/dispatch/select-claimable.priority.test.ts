/**
 * A claim's max_priority (docket populate --priority, seed 000: "only process jobs at this priority
 * or more urgent"): it takes jobs from the head of the order while they are that urgent, leaves
 * the first less urgent job in its place and says so (the dispatcher then answers the claim at
 * once instead of letting it block the claims behind it).
 */
import { describe, expect, test } from 'vitest';
import { FlowGate } from '../../src/dispatch/flow-gate.js';
import { selectClaimable } from '../../src/dispatch/select-claimable.js';
import { FlowCounts } from '../../src/projections/flow.js';
import { QueueOrder } from '../../src/projections/queue-order.js';
import { AggregateStore } from '../../src/store/aggregate-store.js';
import { JobStore } from '../../src/store/job-store.js';
import { BASE_TIME_MS, QUEUE, at, jobEvent } from '../support/arbitraries.js';

function queueOf(priorities: readonly number[]) {
  let seq = 0;
  const store = new JobStore();
  const order = new QueueOrder(() => BASE_TIME_MS, (jobId) => store.get(jobId));
  store.onChange(order.apply);
  const gate = new FlowGate(QUEUE, new AggregateStore(), new FlowCounts(() => ({ concurrency: null, rate: null, key_concurrency: null, key_rate: null })));
  priorities.forEach((priority, i) => {
    const data = { job_id: `p${priority}-${i}`, key: null, params: {}, priority, position: null, run_at: at(0), max_attempts: 1, backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 }, attempt: 1, retry_of: null, waiting: false };
    store.apply({ seq: ++seq, queue: QUEUE, jobId: data.job_id, event: jobEvent('job.submitted', data, { time: at(0) }) });
  });
  const claim = (max: number, maxPriority?: number) => selectClaimable({ queue: QUEUE, order, gate, jobOf: (id) => store.get(id)?.state.job.context, max, maxPriority, replyBudget: 1 << 20, nowMs: BASE_TIME_MS });
  return { claim };
}

describe('max_priority', () => {
  test('takes only jobs that urgent or more, in order, and leaves the rest in place', () => {
    const q = queueOf([5, 1, 2, 9, 1]);
    const first = q.claim(10, 2);
    expect(first).toMatchObject({ jobIds: ['p1-1', 'p1-4', 'p2-2'], beyondPriority: true });
    // Nothing urgent enough is left: none taken, and the less urgent jobs are still there for a claim without the bound.
    expect(q.claim(10, 2)).toMatchObject({ jobIds: [], beyondPriority: true });
    expect(q.claim(10)).toMatchObject({ jobIds: ['p5-0', 'p9-3'], beyondPriority: false });
  });

  test('priority 0 is the most urgent: --priority 0 takes only priority 0', () => {
    const q = queueOf([0, 1, 0]);
    expect(q.claim(10, 0).jobIds).toEqual(['p0-0', 'p0-2']);
  });
});
