/**
 * The folds of the non-job kinds (machines/aggregates.ts) equal their machines: on accept/reject
 * (`snapshot.can(event)`), `value` and `context` after every event, from `initialTransition()`
 * stepped with XState's pure `transition()`; and `decideAggregate` says what `can()` says.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { initialTransition, transition, type AnyStateMachine } from 'xstate';
import { decideAggregate, groupAggregate, jobNodeAggregate, queueAggregate, REFRESHES_KEPT, reservationAggregate, type JobNodeEvent, type GroupEvent, type AggregateDefinition, type AggregateEvent, type FoldState, type JobSetDefinition, type JsonObject, type QueueEvent, type ReservationEvent } from '../../machines/index.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

const time = fc.date({ min: new Date('2026-01-01T00:00:00Z'), max: new Date('2026-01-02T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString());
const meta: fc.Arbitrary<{ node: string; actor?: string }> = fc.record({ node: fc.constantFrom('n1', 'n2'), actor: fc.constantFrom('alice', 'bob') }, { requiredKeys: ['node'] });
const rate = fc.option(fc.record({ limit: fc.integer({ min: 1, max: 5 }), period_ms: fc.integer({ min: 100, max: 5000 }) }), { nil: null });

const jobSet: fc.Arbitrary<JobSetDefinition> = fc.record(
  {
    key_source: fc.constantFrom<JsonObject>({ url: 'postgres://lab@db/lab', sql: 'SELECT a FROM t' }, { keys: [{ a: 1 }] }, { file: '/k.jsonl' }),
    target: fc.constant({ command: ['./done.sh'] }),
    attributes: fc.constant(['a']),
    keep_completed: fc.boolean(),
    stale_timeout_s: fc.nat({ max: 10_000 }),
    auto_refresh: fc.boolean(),
    default_priority: fc.integer({ min: 0, max: 255 }),
    version: fc.constantFrom('git', 'v1'),
  },
  { requiredKeys: ['key_source'] },
);
const counts = fc.record({ added: fc.nat(), removed: fc.nat(), orphaned: fc.nat(), re_pended: fc.nat() });

const queueEvent: fc.Arbitrary<QueueEvent> = fc
  .tuple(
    fc.constantFrom('queue.paused', 'queue.resumed', 'queue.settings_changed', 'queue.jobset_put', 'queue.refreshed'),
    time,
    meta,
    fc.option(fc.string({ maxLength: 5 }), { nil: null }),
    fc.record({ concurrency: fc.option(fc.integer({ min: 1, max: 5 }), { nil: null }), rate, key_concurrency: fc.option(fc.integer({ min: 1, max: 5 }), { nil: null }), key_rate: rate }, { requiredKeys: [] }),
    jobSet,
    counts,
    fc.nat(),
  )
  .map(([type, t, m, reason, settings, definition, refreshed, n]) => {
    const base = { id: `e-${t}-${n}`, time: t, aggregate: { kind: 'queue' as const, id: 'q' }, queue: 'q', meta: m };
    if (type === 'queue.paused') return { ...base, type, data: { reason } };
    if (type === 'queue.resumed') return { ...base, type, data: {} };
    if (type === 'queue.jobset_put') return { ...base, type, data: definition };
    if (type === 'queue.refreshed') return { ...base, type, data: refreshed };
    return { ...base, type, data: settings };
  });

const reservationEvent: fc.Arbitrary<ReservationEvent> = fc
  .tuple(fc.constantFrom('reservation.activated', 'reservation.renewed', 'reservation.released', 'reservation.expired'), time, time, fc.constantFrom('q-r1', 'q-r2'), meta)
  .map(([type, t, expiresAt, reservationId, m]) => {
    const base = { id: `e-${t}`, time: t, aggregate: { kind: 'reservation' as const, id: 'q' }, queue: 'q', meta: m };
    if (type === 'reservation.activated') return { ...base, type, data: { reservation_id: reservationId, holder: 'h', expires_at: expiresAt, job_id: null } };
    if (type === 'reservation.renewed') return { ...base, type, data: { reservation_id: reservationId, expires_at: expiresAt } };
    return { ...base, type, data: { reservation_id: reservationId } };
  });

const groupEvent: fc.Arbitrary<GroupEvent> = fc
  .tuple(fc.constantFrom('group.created', 'group.started', 'group.ended'), time, meta, fc.constantFrom('sequential', 'parallel'), fc.constantFrom('stop', 'continue', 'skip'), fc.integer({ min: 0, max: 3 }), fc.constantFrom('completed', 'partial', 'cancelled'))
  .map(([type, t, m, mode, onFailure, count, status]) => {
    const base = { id: `e-${t}`, time: t, aggregate: { kind: 'group' as const, id: 'g' }, meta: m };
    if (type === 'group.created') return { ...base, type, data: { name: null, mode, on_failure: onFailure, members: Array.from({ length: count }, (_, i) => ({ job_id: `m${i}`, queue: 'q' })) } };
    if (type === 'group.started') return { ...base, type, data: { job_id: 'm0' } };
    return { ...base, type, data: { status } };
  });

const jobNodeEvent: fc.Arbitrary<JobNodeEvent> = fc
  .tuple(
    fc.constantFrom('jobnode.created', 'jobnode.claimed', 'jobnode.completed', 'jobnode.retrying', 'jobnode.failed', 'jobnode.requeued', 'jobnode.skipped', 'jobnode.cancelled'),
    time,
    time,
    fc.constantFrom('r1', 'r2'),
    meta,
    fc.integer({ min: 1, max: 3 }),
    fc.boolean(),
  )
  .map(([type, t, retryAt, runId, m, maxAttempts, retryable]) => {
    const base = { id: `e-${t}`, time: t, aggregate: { kind: 'jobnode' as const, id: 'n1' }, queue: 'q', meta: m };
    const error = { message: 'x', retryable };
    switch (type) {
      case 'jobnode.created':
        return { ...base, type, data: { job_id: 'j', node: 'a', of: 2, quorum: 2, quorum_timeout_ms: 10, max_attempts: maxAttempts, backoff: { base_ms: 1, max_ms: 1, jitter: 0 } } };
      case 'jobnode.claimed':
        return { ...base, type, data: { run_id: runId, worker: 'w', host: 'h', pid: 1, lease_ms: 1000 } };
      case 'jobnode.completed':
        return { ...base, type, data: { run_id: runId, result: null } };
      case 'jobnode.retrying':
        return { ...base, type, data: { run_id: runId, reason: 'error' as const, error, retry_at: retryAt } };
      case 'jobnode.failed':
        return { ...base, type, data: { run_id: runId, reason: 'error' as const, error } };
      case 'jobnode.requeued':
        return { ...base, type, data: {} };
      case 'jobnode.skipped':
        return { ...base, type, data: { reason: 'quorum_reached' } };
      default:
        return { ...base, type, data: { reason: null } };
    }
  });

const view = (snapshot: { value: unknown; context: unknown }) => ({ value: snapshot.value, context: snapshot.context });

function checkAgainstMachine(definition: AggregateDefinition, events: readonly AggregateEvent[]): void {
  const machine: AnyStateMachine = definition.machine;
  let [snapshot] = initialTransition(machine);
  let state: FoldState<unknown> = definition.fold.initialState;
  expect(state).toEqual(view(snapshot));
  for (const [index, event] of events.entries()) {
    const accepted = snapshot.can(event as never);
    const stepped = definition.fold.step(state, event as never);
    expect(stepped !== null, `event ${index} (${event.type}) in ${String(snapshot.value)}`).toBe(accepted);
    expect(decideAggregate(state, event).ok).toBe(accepted);
    if (stepped !== null) state = stepped;
    [snapshot] = transition(machine, snapshot, event as never);
    expect(state, `after event ${index} (${event.type})`).toEqual(view(snapshot));
  }
}

describe('the folds of the other kinds equal their machines', () => {
  test('the fold tables cover every event type of each kind', () => {
    expect([...queueAggregate.fold.eventTypes].sort()).toEqual([...queueAggregate.eventTypes].sort());
    expect([...reservationAggregate.fold.eventTypes].sort()).toEqual([...reservationAggregate.eventTypes].sort());
    expect([...jobNodeAggregate.fold.eventTypes].sort()).toEqual([...jobNodeAggregate.eventTypes].sort());
  });

  fcTest.prop([fc.array(jobNodeEvent, { maxLength: 30 })], { numRuns })('jobnode (a stale run, a retry past max_attempts and an early requeue are refused)', (events) =>
    checkAgainstMachine(jobNodeAggregate as unknown as AggregateDefinition, events),
  );

  fcTest.prop([fc.array(queueEvent, { maxLength: 30 })], { numRuns })('queue', (events) => checkAgainstMachine(queueAggregate as unknown as AggregateDefinition, events));

  fcTest.prop([fc.array(groupEvent, { maxLength: 20 })], { numRuns })('group (no members refused; the end status picks the final state)', (events) => checkAgainstMachine(groupAggregate as unknown as AggregateDefinition, events));

  fcTest.prop([fc.array(reservationEvent, { maxLength: 30 })], { numRuns })('reservation (an expiry before expires_at and a stale id are refused)', (events) =>
    checkAgainstMachine(reservationAggregate as unknown as AggregateDefinition, events),
  );

  test('settings_changed changes only the fields it names; null clears one', () => {
    const base = { id: 'e', time: '2026-01-01T00:00:00.000Z', aggregate: { kind: 'queue' as const, id: 'q' }, queue: 'q', meta: { node: 'n' } };
    let state = queueAggregate.fold.step(queueAggregate.fold.initialState, { ...base, type: 'queue.settings_changed', data: { concurrency: 3, rate: { limit: 5, period_ms: 1000 } } })!;
    state = queueAggregate.fold.step(state, { ...base, type: 'queue.settings_changed', data: { concurrency: null } })!;
    expect(state.context.settings).toEqual({ concurrency: null, rate: { limit: 5, period_ms: 1000 }, key_concurrency: null, key_rate: null });
  });

  test('jobset_put replaces the definition and keeps the flow settings; refreshes keep the latest REFRESHES_KEPT answers by event id', () => {
    const base = { time: '2026-01-01T00:00:00.000Z', aggregate: { kind: 'queue' as const, id: 'q' }, queue: 'q', meta: { node: 'n' } };
    let state = queueAggregate.fold.step(queueAggregate.fold.initialState, { ...base, id: 's', type: 'queue.settings_changed', data: { concurrency: 2 } })!;
    state = queueAggregate.fold.step(state, { ...base, id: 'p', type: 'queue.paused', data: { reason: null } })!;
    state = queueAggregate.fold.step(state, { ...base, id: 'j1', type: 'queue.jobset_put', data: { key_source: { keys: [{ a: 1 }] }, keep_completed: true } })!;
    state = queueAggregate.fold.step(state, { ...base, id: 'j2', type: 'queue.jobset_put', data: { key_source: { file: '/k' } } })!;
    expect(state.value).toBe('paused');
    expect(state.context.jobset).toEqual({ key_source: { file: '/k' } });
    expect(state.context.settings.concurrency).toBe(2);
    for (let i = 0; i < REFRESHES_KEPT + 3; i++) state = queueAggregate.fold.step(state, { ...base, id: `r${i}`, type: 'queue.refreshed', data: { added: i, removed: 0, orphaned: 0, re_pended: 0 } })!;
    expect(state.context.refreshes).toHaveLength(REFRESHES_KEPT);
    expect(state.context.refreshes.at(-1)).toEqual({ event_id: `r${REFRESHES_KEPT + 2}`, at: base.time, counts: { added: REFRESHES_KEPT + 2, removed: 0, orphaned: 0, re_pended: 0 } });
    expect(state.context.refreshes[0]!.event_id).toBe('r3');
  });
});
