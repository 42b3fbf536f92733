/**
 * Flow control against a model (issue 17): random settings, keys, arrivals, claims, completions
 * and clock steps. After every claim the jobs taken are exactly the model's: the queue order with
 * the jobs of held keys skipped, cut at the queue's room (concurrency, rate) and the claim's max;
 * and no limit is ever exceeded (running at once, in all and per key; claims in any window).
 * The real QueueOrder, JobStore, FlowCounts, AggregateStore and FlowGate, on a manual clock.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import type { QueueSettings } from '../../machines/index.js';
import { FlowGate } from '../../src/dispatch/flow-gate.js';
import { selectClaimable } from '../../src/dispatch/select-claimable.js';
import { ParkedKeys } from '../../src/dispatch/parked-keys.js';
import { FlowCounts } from '../../src/projections/flow.js';
import { QueueOrder } from '../../src/projections/queue-order.js';
import { AggregateStore } from '../../src/store/aggregate-store.js';
import { JobStore } from '../../src/store/job-store.js';
import { BASE_TIME_MS, QUEUE, at, jobEvent } from '../support/arbitraries.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 150);
const KEYS = ['a', 'b', 'c', null] as const;

type Step =
  | { readonly kind: 'submit'; readonly key: (typeof KEYS)[number]; readonly priority: number }
  | { readonly kind: 'claim'; readonly max: number }
  | { readonly kind: 'finish'; readonly which: number }
  | { readonly kind: 'advance'; readonly ms: number };

const limit = (max: number) => fc.option(fc.integer({ min: 1, max }), { nil: null });
const rate = fc.option(fc.record({ limit: fc.integer({ min: 1, max: 4 }), period_ms: fc.integer({ min: 100, max: 2_000 }) }), { nil: null });
const settingsArb: fc.Arbitrary<QueueSettings> = fc.record({ concurrency: limit(5), rate, key_concurrency: limit(2), key_rate: rate });
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('submit' as const), key: fc.constantFrom(...KEYS), priority: fc.integer({ min: 0, max: 2 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('claim' as const), max: fc.integer({ min: 1, max: 6 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('finish' as const), which: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 1_500 }) }) },
);

interface ModelJob {
  readonly id: string;
  readonly key: string | null;
  readonly priority: number;
  readonly seq: number;
  status: 'queued' | 'running' | 'done';
}

describe('flow control: claims against a model of the dispatcher', () => {
  // With parking (as the dispatcher runs it) held keys' jobs leave the scan until their key is
  // freed: the claims must be the same as without.
  fcTest.prop([settingsArb, fc.array(stepArb, { maxLength: 80 }), fc.boolean()], { numRuns })('takes the queue order with held keys skipped, and never exceeds a limit (with and without parking)', (settings, steps, parking) => {
    let nowMs = BASE_TIME_MS;
    let seq = 0;
    const store = new JobStore();
    const aggregates = new AggregateStore();
    const order = new QueueOrder(() => nowMs, (jobId) => store.get(jobId));
    const counts = new FlowCounts(() => settings);
    store.onChange(order.apply);
    store.onChange(counts.apply);
    aggregates.apply(++seq, { id: 'settings', type: 'queue.settings_changed', time: at(0), aggregate: { kind: 'queue', id: QUEUE }, queue: QUEUE, data: settings, meta: { node: 'n' } });
    const gate = new FlowGate(QUEUE, aggregates, counts);
    const parked = parking ? new ParkedKeys(QUEUE, order) : undefined;
    const model: ModelJob[] = [];
    const claimTimes: { key: string | null; at: number }[] = [];
    const offset = () => nowMs - BASE_TIME_MS;
    let jobs = 0;

    const inWindow = (key: string | null | undefined, period: number) => claimTimes.filter((c) => (key === undefined || c.key === key) && c.at > nowMs - period).length;
    const running = (key?: string | null) => model.filter((j) => j.status === 'running' && (key === undefined || j.key === key)).length;

    for (const step of steps) {
      switch (step.kind) {
        case 'submit': {
          const id = `j${++jobs}`;
          const data = { job_id: id, key: null, params: {}, priority: step.priority, position: null, run_at: at(offset()), max_attempts: 1, backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0 }, attempt: 1, retry_of: null, waiting: false };
          store.apply({ seq: ++seq, queue: QUEUE, jobId: id, event: jobEvent('job.submitted', step.key === null ? data : { ...data, concurrency_key: step.key }, { time: at(offset()) }) });
          model.push({ id, key: step.key, priority: step.priority, seq, status: 'queued' });
          break;
        }
        case 'claim': {
          // The model: queued jobs in (priority, submit order); the queue's room first, then each
          // job's key, counting the jobs this claim has taken already.
          let room = step.max;
          if (settings.concurrency !== null) room = Math.min(room, settings.concurrency - running());
          if (settings.rate !== null) room = Math.min(room, settings.rate.limit - inWindow(undefined, settings.rate.period_ms));
          const expected: string[] = [];
          const taken = new Map<string, number>();
          const queued = model.filter((j) => j.status === 'queued').sort((a, b) => a.priority - b.priority || a.seq - b.seq);
          for (const job of queued) {
            if (expected.length >= room) break;
            if (job.key !== null) {
              const mine = taken.get(job.key) ?? 0;
              if (settings.key_concurrency !== null && running(job.key) + mine >= settings.key_concurrency) continue;
              if (settings.key_rate !== null && inWindow(job.key, settings.key_rate.period_ms) + mine >= settings.key_rate.limit) continue;
              taken.set(job.key, mine + 1);
            }
            expected.push(job.id);
          }
          parked?.freeDue(nowMs);
          const { jobIds, keys } = selectClaimable({ queue: QUEUE, order, gate, jobOf: (id) => store.get(id)?.state.job.context, max: step.max, replyBudget: 1 << 20, nowMs, ...(parked ? { parked } : {}) });
          expect(jobIds).toEqual(expected);
          // The claims land: the store folds job.claimed, the gate lets go of its in-flight count.
          jobIds.forEach((id, i) => {
            store.apply({ seq: ++seq, queue: QUEUE, jobId: id, event: { ...jobEvent('job.claimed', { run_id: `r-${id}`, worker: 'w', host: 'h', pid: 1, version: 'v', lease_ms: 30_000 }, { time: at(offset()) }), aggregate: { kind: 'job', id } } });
            gate.settled(keys[i]!);
            if (keys[i] !== null) parked?.free(keys[i]!);
            const job = model.find((j) => j.id === id)!;
            job.status = 'running';
            claimTimes.push({ key: job.key, at: nowMs });
          });
          break;
        }
        case 'finish': {
          const live = model.filter((j) => j.status === 'running');
          if (live.length === 0) break;
          const job = live[step.which % live.length]!;
          store.apply({ seq: ++seq, queue: QUEUE, jobId: job.id, event: { ...jobEvent('job.succeeded', { run_id: `r-${job.id}`, result: null }, { time: at(offset()) }), aggregate: { kind: 'job', id: job.id } } });
          job.status = 'done';
          if (job.key !== null) parked?.free(job.key);
          break;
        }
        case 'advance':
          nowMs += step.ms;
          break;
      }
      // Never a limit exceeded, whatever happened.
      if (settings.concurrency !== null) expect(running()).toBeLessThanOrEqual(settings.concurrency);
      if (settings.rate !== null) expect(inWindow(undefined, settings.rate.period_ms)).toBeLessThanOrEqual(settings.rate.limit);
      for (const key of KEYS) {
        if (key === null) continue;
        if (settings.key_concurrency !== null) expect(running(key)).toBeLessThanOrEqual(settings.key_concurrency);
        if (settings.key_rate !== null) expect(inWindow(key, settings.key_rate.period_ms)).toBeLessThanOrEqual(settings.key_rate.limit);
      }
      expect(counts.running(QUEUE)).toBe(running());
    }
  });
});
