/**
 * The queue order's `delayed` count (issue 16, "Views"): kept incrementally beside the heaps, it
 * must always equal what the records say, the delayed part of `snapshot()` (queued jobs whose
 * run_at is after the clock), through submits, moves (with and without a new run_at), cancels,
 * claims in flight, released claims and the clock moving on.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { QueueOrder } from '../../src/projections/queue-order.js';
import { JobStore } from '../../src/store/job-store.js';
import { BASE_TIME_MS, QUEUE, at, jobEvent } from '../support/arbitraries.js';

const JOBS = ['j0', 'j1', 'j2', 'j3', 'j4', 'j5'] as const;

type Step =
  | { readonly kind: 'submit'; readonly job: number; readonly delayMs: number }
  | { readonly kind: 'move'; readonly job: number; readonly priority: number; readonly runAtMs: number | null }
  | { readonly kind: 'cancel'; readonly job: number }
  | { readonly kind: 'take'; readonly claim: boolean }
  | { readonly kind: 'advance'; readonly ms: number };

const jobIndex = fc.integer({ min: 0, max: JOBS.length - 1 });
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('submit' as const), job: jobIndex, delayMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5_000 })) }),
  fc.record({
    kind: fc.constant('move' as const),
    job: jobIndex,
    priority: fc.integer({ min: 0, max: 9 }),
    runAtMs: fc.option(fc.integer({ min: -1_000, max: 6_000 }), { nil: null }),
  }),
  fc.record({ kind: fc.constant('cancel' as const), job: jobIndex }),
  fc.record({ kind: fc.constant('take' as const), claim: fc.boolean() }),
  fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 3_000 }) }),
);

describe('queue order: the delayed count', () => {
  fcTest.prop([fc.array(stepArb, { maxLength: 60 })])('equals the delayed jobs of the snapshot after every step', (steps) => {
    let nowMs = BASE_TIME_MS;
    let seq = 0;
    const store = new JobStore();
    const order = new QueueOrder(() => nowMs, (jobId) => store.get(jobId));
    store.onChange(order.apply);
    const offset = () => nowMs - BASE_TIME_MS;
    // Events the machine refuses (a move of a running job, a second submit) change nothing:
    // they are part of what the count must survive.
    const apply = (jobId: string, event: Parameters<JobStore['apply']>[0]['event']) => store.apply({ seq: ++seq, queue: QUEUE, jobId, event });

    for (const step of steps) {
      switch (step.kind) {
        case 'submit': {
          const jobId = JOBS[step.job]!;
          apply(
            jobId,
            jobEvent(
              'job.submitted',
              {
                job_id: jobId, key: null, params: {}, priority: 5, position: null, run_at: at(offset() + step.delayMs), max_attempts: 1,
                backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 }, attempt: 1, retry_of: null, waiting: false,
              },
              { time: at(offset()) },
            ),
          );
          break;
        }
        case 'move': {
          const jobId = JOBS[step.job]!;
          const runAt = step.runAtMs === null ? {} : { run_at: at(offset() + step.runAtMs) };
          apply(jobId, { ...jobEvent('job.moved', { priority: step.priority, position: null, ...runAt }, { time: at(offset()) }), aggregate: { kind: 'job', id: jobId } });
          break;
        }
        case 'cancel': {
          const jobId = JOBS[step.job]!;
          apply(jobId, { ...jobEvent('job.cancelled', { reason: null }, { time: at(offset()) }), aggregate: { kind: 'job', id: jobId } });
          break;
        }
        case 'take': {
          const jobId = order.take(QUEUE);
          if (jobId === undefined) break;
          if (!step.claim) {
            order.release(QUEUE, jobId);
            break;
          }
          const claimed = jobEvent(
            'job.claimed',
            { run_id: `r${seq}`, worker: 'w', host: 'h', pid: 1, version: '1', lease_ms: 30_000 },
            { time: at(offset()) },
          );
          if (apply(jobId, { ...claimed, aggregate: { kind: 'job', id: jobId } }) !== 'applied') order.release(QUEUE, jobId);
          break;
        }
        case 'advance':
          nowMs += step.ms;
          break;
        default: {
          const never: never = step;
          throw new Error(`unknown step ${JSON.stringify(never)}`);
        }
      }
      const delayed = order.snapshot(QUEUE).delayed.map((d) => d.jobId);
      expect(order.delayedCount(QUEUE)).toBe(delayed.length);
      for (const jobId of JOBS) expect(order.isDelayed(QUEUE, jobId), jobId).toBe(delayed.includes(jobId));
    }
  });
});
