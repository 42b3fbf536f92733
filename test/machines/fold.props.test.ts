/**
 * The fast fold (machines/fold.ts) must equal the machines it is derived from (DESIGN "Replay
 * cost", STACK.md §3): on accept/reject (`snapshot.can(event)`, both `step` and `accepts`, which
 * `decideJob` uses), `value` and `context`, after
 * every event, starting from `initialTransition()` and stepping with XState's pure `transition()`.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { initialTransition, transition } from 'xstate';
import type { FoldState } from '../../machines/fold.js';
import { evolveJob, INITIAL_JOB_STATE, jobFold, runFold, type JobState } from '../../machines/job.aggregate.js';
import { JOB_EVENT_TYPES, type JobEvent } from '../../machines/job.events.js';
import { jobMachine } from '../../machines/job.machine.js';
import { jobRunMachine } from '../../machines/job-run.machine.js';
import { jobEventArb, jobEventSequenceArb } from '../support/arbitraries.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

/** Either a plausible history or a jumble of unrelated events (times out of order, any run id). */
const sequencesArb = fc.oneof({ arbitrary: jobEventSequenceArb, weight: 3 }, { arbitrary: fc.array(jobEventArb, { maxLength: 40 }), weight: 1 });

const view = (snapshot: { value: unknown; context: unknown }) => ({ value: snapshot.value, context: snapshot.context });

interface MachineSnapshot {
  readonly value: unknown;
  readonly context: unknown;
  can(event: JobEvent): boolean;
}

/**
 * Steps `fold` and a machine (`initial`, stepped by `next`) side by side through `events`,
 * checking after every event that the fold refuses exactly when `can()` is false and agrees on
 * value and context.
 */
function checkAgainstMachine<C, S extends MachineSnapshot>(
  fold: { readonly initialState: FoldState<C>; step(state: FoldState<C>, event: JobEvent): FoldState<C> | null; accepts(state: FoldState<C>, event: JobEvent): boolean },
  initial: S,
  next: (snapshot: S, event: JobEvent) => S,
  events: readonly JobEvent[],
): void {
  let snapshot = initial;
  let state = fold.initialState;
  expect(state).toEqual(view(snapshot));
  for (const [index, event] of events.entries()) {
    const accepted = snapshot.can(event);
    const stepped = fold.step(state, event);
    const nextSnapshot = next(snapshot, event);
    expect(stepped !== null, `event ${index} (${event.type}) in ${String(snapshot.value)}`).toBe(accepted);
    expect(fold.accepts(state, event), `accepts: event ${index} (${event.type}) in ${String(snapshot.value)}`).toBe(accepted);
    if (stepped !== null) state = stepped;
    expect(state, `after event ${index} (${event.type})`).toEqual(view(nextSnapshot));
    snapshot = nextSnapshot;
  }
}

describe('the fast fold equals the machines', () => {
  test('the fold tables cover every event type each machine handles', () => {
    expect([...jobFold.eventTypes].sort()).toEqual([...JOB_EVENT_TYPES].sort());
    expect([...runFold.eventTypes].sort()).toEqual([...jobFold.eventTypes].sort());
  });

  fcTest.prop([sequencesArb], { numRuns })('jobFold.step agrees with the Job machine after every event', (events) => {
    checkAgainstMachine(jobFold, initialTransition(jobMachine)[0], (snapshot, event) => transition(jobMachine, snapshot, event)[0], events);
  });

  fcTest.prop([sequencesArb], { numRuns })('runFold.step agrees with the JobRun machine after every event', (events) => {
    checkAgainstMachine(runFold, initialTransition(jobRunMachine)[0], (snapshot, event) => transition(jobRunMachine, snapshot, event)[0], events);
  });

  fcTest.prop([sequencesArb], { numRuns })(
    'evolveJob agrees with both machines: accepted when both can(), then equal value and context',
    (events) => {
      let [job] = initialTransition(jobMachine);
      let [run] = initialTransition(jobRunMachine);
      let state: JobState = INITIAL_JOB_STATE;
      expect(state).toEqual({ job: view(job), run: view(run) });
      for (const [index, event] of events.entries()) {
        const accepted = job.can(event) && run.can(event);
        const next = evolveJob(state, event);
        expect(next !== null, `event ${index} (${event.type}) in ${job.value}/${run.value}`).toBe(accepted);
        if (next !== null) {
          [job] = transition(jobMachine, job, event);
          [run] = transition(jobRunMachine, run, event);
          state = next;
        }
        expect(state, `after event ${index} (${event.type})`).toEqual({ job: view(job), run: view(run) });
      }
    },
  );
});
