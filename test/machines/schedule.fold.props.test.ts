/**
 * The folds derived from the Template and Schedule machines (machines/fold.ts) equal the
 * machines: on accept/reject (`snapshot.can(event)`), `value` and `context`, after every event of
 * random histories, stepping the machines with XState's pure `transition()`. Also the machine's
 * own invariant: no tick is fired twice by the cron, and handled ticks only move forward.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { initialTransition, transition, type AnyMachineSnapshot, type AnyStateMachine, type EventObject } from 'xstate';
import type { Fold } from '../../machines/fold.js';
import { SCHEDULE_EVENT_TYPES } from '../../machines/schedule.events.js';
import { scheduleFold, scheduleMachine } from '../../machines/schedule.machine.js';
import { TEMPLATE_EVENT_TYPES } from '../../machines/template.events.js';
import { templateFold, templateMachine } from '../../machines/template.machine.js';
import { scheduleHistoryArb, templateHistoryArb } from '../support/schedule-arbitraries.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 300);

const view = (snapshot: { value: unknown; context: unknown }) => ({ value: snapshot.value, context: snapshot.context });

/** Steps the fold and the machine side by side; returns how many events were accepted. */
function checkAgainstMachine<C, E extends EventObject>(fold: Fold<C, E>, machine: AnyStateMachine, events: readonly E[]): number {
  let [snapshot] = initialTransition(machine) as [AnyMachineSnapshot, unknown];
  let state = fold.initialState;
  let accepted = 0;
  expect(state).toEqual(view(snapshot));
  for (const [index, event] of events.entries()) {
    const can = snapshot.can(event);
    const stepped = fold.step(state, event);
    expect(stepped !== null, `event ${index} (${event.type}) in ${String(snapshot.value)}`).toBe(can);
    const [next] = transition(machine, snapshot, event) as [AnyMachineSnapshot, unknown];
    if (stepped !== null) {
      state = stepped;
      accepted += 1;
    } else {
      // A refusal changes nothing (XState returns the same snapshot).
      expect(next).toBe(snapshot);
    }
    expect(state, `after event ${index} (${event.type})`).toEqual(view(next));
    snapshot = next;
  }
  return accepted;
}

describe('the template and schedule folds equal their machines', () => {
  test('the fold tables cover every event type', () => {
    expect([...templateFold.eventTypes].sort()).toEqual([...TEMPLATE_EVENT_TYPES].sort());
    expect([...scheduleFold.eventTypes].sort()).toEqual([...SCHEDULE_EVENT_TYPES].sort());
  });

  fcTest.prop([templateHistoryArb], { numRuns })('templateFold.step agrees with the Template machine after every event', (events) => {
    checkAgainstMachine(templateFold, templateMachine, events);
  });

  fcTest.prop([scheduleHistoryArb], { numRuns })('scheduleFold.step agrees with the Schedule machine after every event', (events) => {
    checkAgainstMachine(scheduleFold, scheduleMachine, events);
  });

  test('the histories are not all refused: some generated sequences fire and miss', () => {
    // Guards the arbitraries: a property over refusals only would prove little.
    let fires = 0;
    let misses = 0;
    for (const events of fc.sample(scheduleHistoryArb, { numRuns: 300, seed: 7 })) {
      let state = scheduleFold.initialState;
      for (const e of events) {
        const next = scheduleFold.step(state, e);
        if (next === null) continue;
        if (e.type === 'schedule.fired') fires += 1;
        if (e.type === 'schedule.missed') misses += 1;
        state = next;
      }
    }
    expect(fires).toBeGreaterThan(50);
    expect(misses).toBeGreaterThan(20);
  });

  fcTest.prop([scheduleHistoryArb], { numRuns })('a cron fire never repeats a tick, and handled_until never goes back', (events) => {
    let state = scheduleFold.initialState;
    const cronTicks = new Set<string>();
    for (const event of events) {
      const next = scheduleFold.step(state, event);
      if (next === null) continue;
      const before = state.context.handled_until;
      const after = next.context.handled_until;
      if (before !== null) expect(after !== null && Date.parse(after) >= Date.parse(before)).toBe(true);
      if (event.type === 'schedule.fired' && (event.data.trigger ?? 'cron') === 'cron') {
        expect(cronTicks.has(event.data.tick)).toBe(false);
        cronTicks.add(event.data.tick);
        expect(state.value).toBe('enabled');
      }
      if (event.type === 'schedule.fired') expect(state.value).toBe('enabled');
      state = next;
    }
  });
});
