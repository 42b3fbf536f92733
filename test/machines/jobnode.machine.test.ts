/**
 * The JobNode machine (fan-out jobs, seed 004): its transitions, fencing by run id, retries
 * within max_attempts, and the quorum rule (`fanOutVerdict`) that ends a fan-out job.
 */
import { describe, expect, test } from 'vitest';
import {
  decideAggregate,
  defaultQuorum,
  fanOutVerdict,
  jobNodeAggregate,
  nodeRunFailure,
  quorumDeadlineMs,
  type FoldState,
  type JobNodeContext,
  type JobNodeEvent,
  type JobNodeStatus,
} from '../../machines/index.js';

const fold = jobNodeAggregate.fold;
let serial = 0;

function ev<T extends JobNodeEvent['type']>(type: T, data: Extract<JobNodeEvent, { type: T }>['data'], time = '2026-01-01T00:00:00.000Z'): JobNodeEvent {
  return { id: `e${++serial}`, type, time, aggregate: { kind: 'jobnode', id: 'n1' }, queue: 'q', data, meta: { node: 'test' } } as JobNodeEvent;
}

const created = (maxAttempts = 2) => ev('jobnode.created', { job_id: 'j', node: 'a', of: 3, quorum: 2, quorum_timeout_ms: 1_000, max_attempts: maxAttempts, backoff: { base_ms: 100, max_ms: 1_000, jitter: 0 } });
const claimed = (runId: string) => ev('jobnode.claimed', { run_id: runId, worker: 'w', host: 'h', pid: 1, lease_ms: 5_000 });
const error = { message: 'boom' };

function run(events: readonly JobNodeEvent[]): FoldState<JobNodeContext> {
  let state = fold.initialState as FoldState<JobNodeContext>;
  for (const event of events) {
    const next = fold.step(state, event as never);
    if (next === null) throw new Error(`${event.type} refused in ${state.value}`);
    state = next as FoldState<JobNodeContext>;
  }
  return state;
}

describe('JobNode transitions', () => {
  test('queued -> running -> completed, by the run that holds it', () => {
    const state = run([created(), claimed('r1'), ev('jobnode.completed', { run_id: 'r1', result: { ok: true } })]);
    expect(state.value).toBe('completed');
    expect(state.context).toMatchObject({ attempt: 1, run_id: 'r1', result: { ok: true }, finished_at: '2026-01-01T00:00:00.000Z' });
  });

  test('a completion naming another run is refused (fencing); a second claim while running is illegal', () => {
    const running = run([created(), claimed('r1')]);
    expect(fold.step(running as never, ev('jobnode.completed', { run_id: 'r2', result: null }) as never)).toBeNull();
    expect(fold.step(running as never, claimed('r2') as never)).toBeNull();
    const decision = decideAggregate(running, claimed('r2') as never);
    expect(decision).toMatchObject({ ok: false, code: 'invalid_transition', reason: 'cannot claim jobnode n1: it is already running' });
  });

  test('retrying -> queued only at retry_at, then a new run; attempts bounded by max_attempts', () => {
    const retrying = run([created(2), claimed('r1'), ev('jobnode.retrying', { run_id: 'r1', reason: 'error', error, retry_at: '2026-01-01T00:00:01.000Z' })]);
    expect(retrying.value).toBe('retrying');
    expect(fold.step(retrying as never, ev('jobnode.requeued', {}, '2026-01-01T00:00:00.500Z') as never)).toBeNull();
    const again = run([created(2), claimed('r1'), ev('jobnode.retrying', { run_id: 'r1', reason: 'error', error, retry_at: '2026-01-01T00:00:01.000Z' }), ev('jobnode.requeued', {}, '2026-01-01T00:00:01.000Z'), claimed('r2')]);
    expect(again.context.attempt).toBe(2);
    // The second attempt was the last: retrying is refused, failing is not.
    expect(fold.step(again as never, ev('jobnode.retrying', { run_id: 'r2', reason: 'error', error, retry_at: '2026-01-01T00:00:02.000Z' }) as never)).toBeNull();
    expect(fold.step(again as never, ev('jobnode.failed', { run_id: 'r2', reason: 'error', error }) as never)?.value).toBe('failed');
  });

  test('a non-retryable error is never retried', () => {
    const running = run([created(5), claimed('r1')]);
    expect(fold.step(running as never, ev('jobnode.retrying', { run_id: 'r1', reason: 'error', error: { message: 'x', retryable: false }, retry_at: '2026-01-01T00:00:01.000Z' }) as never)).toBeNull();
    expect(nodeRunFailure(running.context, 'n1', 0, { message: 'x', retryable: false })).toEqual({ type: 'jobnode.failed' });
    expect(nodeRunFailure(running.context, 'n1', 0, error)).toEqual({ type: 'jobnode.retrying', retry_at_ms: 100 });
  });

  test('skipped and cancelled from queued, running and retrying; nothing after an end', () => {
    for (const before of [[created()], [created(), claimed('r1')], [created(), claimed('r1'), ev('jobnode.retrying', { run_id: 'r1', reason: 'error', error, retry_at: '2026-01-01T00:00:01.000Z' })]]) {
      expect(fold.step(run(before) as never, ev('jobnode.skipped', { reason: 'quorum_reached' }) as never)?.value).toBe('skipped');
      expect(fold.step(run(before) as never, ev('jobnode.cancelled', { reason: null }) as never)?.value).toBe('cancelled');
    }
    const done = run([created(), claimed('r1'), ev('jobnode.completed', { run_id: 'r1', result: null })]);
    for (const late of [ev('jobnode.skipped', { reason: 'x' }), ev('jobnode.cancelled', { reason: null }), claimed('r2')]) expect(fold.step(done as never, late as never)).toBeNull();
  });
});

describe('the quorum rule', () => {
  const s = (...statuses: JobNodeStatus[]) => statuses;
  test('default quorum is a strict majority', () => {
    expect([1, 2, 3, 4, 5].map(defaultQuorum)).toEqual([1, 2, 2, 3, 3]);
  });
  test('succeeds once a quorum completed and every other node ended', () => {
    expect(fanOutVerdict(3, 2, s('completed', 'completed', 'running'))).toBe('pending');
    expect(fanOutVerdict(3, 2, s('completed', 'completed', 'failed'))).toBe('succeeded');
    expect(fanOutVerdict(3, 2, s('completed', 'completed', 'skipped'))).toBe('succeeded');
    expect(fanOutVerdict(1, 1, s('completed'))).toBe('succeeded');
  });
  test('fails as soon as the quorum can no longer be reached', () => {
    expect(fanOutVerdict(3, 2, s('failed', 'failed', 'queued'))).toBe('failed');
    expect(fanOutVerdict(3, 3, s('failed', 'running', 'queued'))).toBe('failed');
    expect(fanOutVerdict(3, 2, s('failed', 'retrying', 'queued'))).toBe('pending');
    expect(fanOutVerdict(2, 2, s('completed', 'cancelled'))).toBe('failed');
  });
  test('nodes not folded yet count as live', () => {
    expect(fanOutVerdict(3, 2, s('failed'))).toBe('pending');
    expect(fanOutVerdict(3, 3, s('failed'))).toBe('failed');
  });
  test('the quorum deadline runs from the first completion', () => {
    const node = (value: string, finished: string | null) => ({ value, context: { ...run([created()]).context, finished_at: finished } });
    expect(quorumDeadlineMs([node('running', null), node('queued', null)])).toBeNull();
    expect(quorumDeadlineMs([node('completed', '2026-01-01T00:00:05.000Z'), node('completed', '2026-01-01T00:00:03.000Z'), node('failed', '2026-01-01T00:00:01.000Z')])).toBe(Date.parse('2026-01-01T00:00:03.000Z') + 1_000);
  });
});
