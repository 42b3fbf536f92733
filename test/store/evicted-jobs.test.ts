/**
 * Eviction of finished jobs (issue 12 item 7) without NATS: the compact index finds every id it
 * holds and no other; an evicted job stays known (its id taken, its status and its chain's
 * outcome kept, key generations skipped); its body read back from its commits by position is
 * the one it had; and the sweep's decisions (retry pending, job set views).
 */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { positionOf, type JobEvent } from '../../machines/index.js';
import { freeKeyedJobId } from '../../src/commands/submit.js';
import { canonicalJson, keyedJobId, retryJobId } from '../../src/ids.js';
import { KeyIndex } from '../../src/projections/key-index.js';
import { QueueIndex } from '../../src/projections/queue-index.js';
import { dependencyOutcome } from '../../src/reactors/dependencies.js';
import { evictionOf } from '../../src/reactors/evictor.js';
import { AggregateStore } from '../../src/store/aggregate-store.js';
import { EvictedIndex, fingerprintOf } from '../../src/store/evicted-index.js';
import { readEvictedJob } from '../../src/store/evicted-jobs.js';
import { JobStore } from '../../src/store/job-store.js';
import { QUEUE, at, jobEvent, makeJobEventSequenceArb } from '../support/arbitraries.js';

const BACKOFF = { base_ms: 1000, max_ms: 60_000, jitter: 0 };

function submitted(jobId: string, options: { key?: Record<string, number>; maxAttempts?: number; attempt?: number; retryOf?: string; id?: string } = {}) {
  return jobEvent('job.submitted', {
    job_id: jobId, key: options.key ?? null, params: { n: 1 }, priority: 5, position: null, run_at: at(0), max_attempts: options.maxAttempts ?? 1,
    backoff: BACKOFF, attempt: options.attempt ?? 1, retry_of: options.retryOf ?? null, waiting: false,
  }, options.id === undefined ? {} : { id: options.id });
}
const claimed = (jobId: string, runId: string) =>
  jobEvent('job.claimed', { job_id: jobId, run_id: runId, worker: 'w', host: 'h', pid: 1, version: '1', lease_ms: 30_000 } as never, { time: at(10) });
const succeeded = (jobId: string, runId: string) => jobEvent('job.succeeded', { job_id: jobId, run_id: runId, result: { ok: true } } as never, { time: at(20) });
const failed = (jobId: string, runId: string) => jobEvent('job.failed', { job_id: jobId, run_id: runId, reason: 'error', error: { message: 'boom' } } as never, { time: at(20) });

/** A store with its projections, folding events one commit each from sequence `seq` on. */
function setUp() {
  const store = new JobStore();
  const keys = new KeyIndex();
  const queueIndex = new QueueIndex();
  store.onChange(keys.apply);
  store.onChange(queueIndex.apply);
  store.onEvict(queueIndex.evict);
  const commits = new Map<number, JobEvent[]>();
  let seq = 0;
  const fold = (...events: JobEvent[]) => {
    seq += 1;
    commits.set(seq, events);
    events.forEach((event, index) => store.apply({ seq: positionOf(seq, index), queue: event.queue!, jobId: event.aggregate.id, event }));
  };
  const read = async (s: number) => new TextEncoder().encode(JSON.stringify({ v: 2, commit: `c${s}`, partition: `q.${QUEUE}`, writer: { node: 'n', epoch: 1 }, prev_hash: null, events: commits.get(s) ?? [] }));
  return { store, keys, queueIndex, fold, read, ctx: { store, keys, aggregates: new AggregateStore() } };
}

describe('the compact index', () => {
  test('finds every fingerprint it holds, under its id and its aliases, and no other', () => {
    const index = new EvictedIndex();
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const fps = i % 10 === 0 ? [fingerprintOf(`job-${i}`), fingerprintOf(`event-${i}`)] : [fingerprintOf(`job-${i}`)];
      index.add(fps, { queue: `q${i % 3}`, status: i % 2 === 0 ? 'succeeded' : 'cancelled', outcome: i % 2 === 0 ? 'succeeded' : 'cancelled', positions: [positionOf(i + 1, 0), positionOf(i + 2, 3)] });
    }
    expect(index.size).toBe(n);
    for (let i = 0; i < n; i += 7) {
      const row = index.rowOf(fingerprintOf(`job-${i}`));
      expect(row).toBe(i);
      expect(index.entryAt(row)).toEqual({ row: i, queue: `q${i % 3}`, status: i % 2 === 0 ? 'succeeded' : 'cancelled', outcome: i % 2 === 0 ? 'succeeded' : 'cancelled', positions: [positionOf(i + 1, 0), positionOf(i + 2, 3)] });
      expect(index.rowOf(fingerprintOf(`event-${i}`))).toBe(i % 10 === 0 ? i : -1);
      expect(index.rowOf(fingerprintOf(`job-${i + n}`))).toBe(-1);
    }
    // A later event of an evicted job: its position joins, its status moves; a job added again keeps its row.
    index.update(5, positionOf(99_999, 1), 'removed');
    expect(index.entryAt(5)).toMatchObject({ status: 'removed', outcome: 'cancelled', positions: [positionOf(6, 0), positionOf(7, 3), positionOf(99_999, 1)] });
    expect(index.add([fingerprintOf('job-5')], { queue: 'q2', status: 'removed', outcome: 'cancelled', positions: [1, 2] })).toBe(5);
    expect(index.size).toBe(n);
  });
});

describe('an evicted job', () => {
  test('keeps its id taken, its status and queue; leaves list; its body comes back from its commits by position', async () => {
    const { store, queueIndex, fold, read } = setUp();
    fold(submitted('a'));
    fold(claimed('a', 'r1'), submitted('b'));
    fold(succeeded('a', 'r1'));
    const body = store.get('a')!;
    const entry = store.evict('a', 'succeeded')!;
    expect(store.get('a')).toBeUndefined();
    expect(store.has('a')).toBe(true);
    expect(store.has('nope')).toBe(false);
    expect(store.statusOf('a')).toBe('succeeded');
    expect(store.queueOf('a')).toBe(QUEUE);
    expect(entry.positions).toEqual([positionOf(1, 0), positionOf(2, 0), positionOf(3, 0)]);
    expect([...queueIndex.after(QUEUE, 0)].map((j) => j.jobId)).toEqual(['b']);
    expect(await readEvictedJob(read, entry)).toEqual(body);
    // Folded again (a replay from an older point): nothing moves.
    expect(store.apply({ seq: positionOf(3, 0), queue: QUEUE, jobId: 'a', event: succeeded('a', 'r1') })).toBe('already_applied');
    expect(store.refused).toBe(0);
  });

  test('property: any legal history read back from its positions is the body it had', async () => {
    await fc.assert(
      fc.asyncProperty(makeJobEventSequenceArb({ maxLength: 12 }), fc.integer({ min: 1, max: 3 }), async (events, perCommit) => {
        const store = new JobStore();
        const commits = new Map<number, JobEvent[]>();
        events.forEach((event, i) => {
          const seq = Math.floor(i / perCommit) + 1;
          commits.set(seq, [...(commits.get(seq) ?? []), event]);
          store.apply({ seq: positionOf(seq, i % perCommit), queue: event.queue!, jobId: event.aggregate.id, event });
        });
        const jobId = events[0]!.aggregate.id;
        const body = store.get(jobId);
        if (body === undefined) return;
        const entry = store.evict(jobId, body.state.job.value)!;
        const read = async (s: number) => new TextEncoder().encode(JSON.stringify({ v: 2, commit: `c${s}`, partition: 'q', writer: { node: 'n', epoch: 1 }, prev_hash: null, events: commits.get(s) }));
        expect(await readEvictedJob(read, entry)).toEqual(body);
      }),
      { numRuns: 200 },
    );
  });

  test('a later event on it (a removal decided by a node that kept it longer) moves its status; the body read back again is evicted again in place', async () => {
    const { store, fold, read } = setUp();
    fold(submitted('a'));
    fold(jobEvent('job.cancelled', { job_id: 'a', reason: null } as never, { time: at(5) }));
    store.evict('a', 'cancelled');
    fold(jobEvent('job.removed', { job_id: 'a', reason: 'deleted' } as never, { time: at(6) }));
    expect(store.statusOf('a')).toBe('removed');
    expect(store.refused).toBe(0);
    const entry = store.evicted('a')!;
    expect(entry.positions).toHaveLength(3);
    const body = await readEvictedJob(read, entry);
    expect(body.state.job.value).toBe('removed');
    store.reinstate(body);
    expect(store.get('a')).toEqual(body);
    expect(store.evicted('a')).toBeUndefined();
    store.evict('a', 'removed');
    expect(store.evictedCount).toBe(1);
  });

  test('key generations: a keyed submit never takes an evicted generation\'s id', () => {
    const { store, keys, fold } = setUp();
    const key = { subject: 42 };
    const canonical = canonicalJson(key);
    const first = keyedJobId(QUEUE, canonical, 0);
    fold(submitted(first, { key }));
    fold(claimed(first, 'r1'));
    fold(succeeded(first, 'r1'));
    store.evict(first, 'succeeded');
    expect(freeKeyedJobId({ store, keys }, QUEUE, canonical)).toEqual({ jobId: keyedJobId(QUEUE, canonical, 1), generation: 1 });
    // Even from generation 0 (a node that lost its key index): the evicted id is taken.
    expect(freeKeyedJobId({ store, keys }, QUEUE, canonical, 0).generation).toBe(1);
  });

  test('a keyed job found by its submit event id (a resent keyed submit) after eviction', () => {
    const { store, fold } = setUp();
    const key = { subject: 7 };
    const jobId = keyedJobId(QUEUE, canonicalJson(key), 0);
    fold(submitted(jobId, { key, id: 'eFromCommand' }));
    fold(jobEvent('job.cancelled', { job_id: jobId, reason: null } as never));
    expect(store.bySubmitEventId('eFromCommand')?.jobId).toBe(jobId);
    store.evict(jobId, 'cancelled');
    expect(store.bySubmitEventId('eFromCommand')).toBeUndefined();
    expect(store.evictedBySubmitEventId('eFromCommand')).toEqual(store.evicted(jobId));
    // The event id is not a job id: nothing is found under it as one.
    expect(store.has('eFromCommand')).toBe(false);
  });

  test('dependencies: an evicted succeeded job counts as succeeded; an evicted failed chain by what it came to', () => {
    const { store, keys, fold, ctx } = setUp();
    fold(submitted('ok'), submitted('bad'), submitted('chain', { maxAttempts: 2 }));
    fold(claimed('ok', 'r1'), claimed('bad', 'r2'), claimed('chain', 'r3'));
    fold(succeeded('ok', 'r1'), failed('bad', 'r2'), failed('chain', 'r3'));
    const retry = retryJobId('chain', 1);
    fold(submitted(retry, { maxAttempts: 2, attempt: 2, retryOf: 'chain' }));
    fold(claimed(retry, 'r4'));
    fold(succeeded(retry, 'r4'));
    // The failed job that gets a retry waits for its follower's eviction; then it goes, with the chain's outcome.
    expect(evictionOf(ctx, store.get('chain')!)).toEqual({ kind: 'later' });
    for (const id of ['ok', 'bad', retry]) {
      const decision = evictionOf(ctx, store.get(id)!);
      expect(decision.kind).toBe('evict');
      if (decision.kind === 'evict') store.evict(id, decision.outcome);
    }
    expect(evictionOf(ctx, store.get('chain')!)).toEqual({ kind: 'evict', outcome: 'succeeded' });
    expect(dependencyOutcome({ store, keys }, 'chain')).toEqual({ kind: 'succeeded' });
    store.evict('chain', 'succeeded');
    expect(dependencyOutcome({ store, keys }, 'ok')).toEqual({ kind: 'succeeded' });
    expect(dependencyOutcome({ store, keys }, 'bad')).toEqual({ kind: 'ended', jobId: 'bad', status: 'failed' });
    expect(dependencyOutcome({ store, keys }, 'chain')).toEqual({ kind: 'succeeded' });
    expect(dependencyOutcome({ store, keys }, 'unknown')).toBeUndefined();
  });

  test('live jobs are never evicted', () => {
    const { store, fold, ctx } = setUp();
    fold(submitted('q1'));
    fold(submitted('r1j'));
    fold(claimed('r1j', 'r1'));
    expect(evictionOf(ctx, store.get('q1')!)).toEqual({ kind: 'keep' });
    expect(evictionOf(ctx, store.get('r1j')!)).toEqual({ kind: 'keep' });
  });
});
