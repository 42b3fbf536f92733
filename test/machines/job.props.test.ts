/**
 * Properties of the Job and JobRun machines and of the job aggregate that folds both (STYLE
 * 2.13): replay of accepted events equals a live actor; a refusal changes nothing; never two
 * open runs; terminal job states absorb; a terminal run is write-once (seed 002 INV-002); the
 * decider (asks the machines) and the fast fold agree on every state and event.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { createActor, initialTransition, transition } from 'xstate';
import { decideJob, evolveJob, INITIAL_JOB_STATE, type JobState } from '../../machines/job.aggregate.js';
import { JOB_EVENT_TYPES, type JobEvent } from '../../machines/job.events.js';
import { jobMachine, TERMINAL_JOB_STATUSES, type JobStatus } from '../../machines/job.machine.js';
import { jobRunMachine, type RunContext, type RunStatus } from '../../machines/job-run.machine.js';
import { jobEvent, jobEventArb, jobEventSequenceArb, RUN_IDS } from '../support/arbitraries.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

const TERMINAL_RUN_STATUSES: readonly RunStatus[] = ['completed', 'failed', 'skipped'];
const isTerminalJob = (status: JobStatus) => TERMINAL_JOB_STATUSES.includes(status);
const isTerminalRun = (status: RunStatus) => TERMINAL_RUN_STATUSES.includes(status);

const view = (snapshot: { value: unknown; context: unknown }) => ({ value: snapshot.value, context: snapshot.context });

/** Folds `events` through the aggregate; each step records the state before, the event and the state after (null: refused). */
function foldAggregate(events: readonly JobEvent[]) {
  const steps: { before: JobState; event: JobEvent; after: JobState | null }[] = [];
  let state: JobState = INITIAL_JOB_STATE;
  for (const event of events) {
    const after = evolveJob(state, event);
    steps.push({ before: state, event, after });
    if (after !== null) state = after;
  }
  return { steps, final: state, accepted: steps.filter((s) => s.after !== null).map((s) => s.event) };
}

/** The run's context without its artifacts: the part that is write-once after the run closes. */
function withoutArtifacts(context: RunContext): Omit<RunContext, 'artifacts'> {
  const { artifacts: _artifacts, ...rest } = context;
  return rest;
}

describe('replay equals a live actor', () => {
  fcTest.prop([jobEventSequenceArb], { numRuns })('each machine: a live actor sent every event equals the fold of the events it accepts', (events) => {
    for (const machine of [jobMachine, jobRunMachine] as const) {
      const live = createActor(machine).start();
      // Folded with the pure functions, keeping only what the machine accepts.
      let [folded] = initialTransition(machine);
      const accepted: JobEvent[] = [];
      for (const event of events) {
        if (folded.can(event as never)) {
          accepted.push(event);
          [folded] = transition(machine, folded as never, event as never);
        }
        live.send(event as never);
        expect(view(live.getSnapshot())).toEqual(view(folded));
      }
      live.stop();
      // A fresh actor sent only the accepted events ends in the same state.
      const replayed = createActor(machine).start();
      for (const event of accepted) replayed.send(event as never);
      expect(view(replayed.getSnapshot())).toEqual(view(folded));
      replayed.stop();
    }
  });

  fcTest.prop([jobEventSequenceArb], { numRuns })('the aggregate: its accepted events, sent to live actors, give the same state and replay the same', (events) => {
    const { final, accepted } = foldAggregate(events);
    const job = createActor(jobMachine).start();
    const run = createActor(jobRunMachine).start();
    let replayed: JobState | null = INITIAL_JOB_STATE;
    for (const event of accepted) {
      expect(job.getSnapshot().can(event)).toBe(true);
      expect(run.getSnapshot().can(event)).toBe(true);
      job.send(event);
      run.send(event);
      replayed = replayed === null ? null : evolveJob(replayed, event);
      expect(replayed, `replay of ${event.type}`).not.toBeNull();
    }
    expect({ job: view(job.getSnapshot()), run: view(run.getSnapshot()) }).toEqual(final);
    expect(replayed).toEqual(final);
    job.stop();
    run.stop();
  });
});

describe('a refused event changes nothing', () => {
  fcTest.prop([jobEventSequenceArb, fc.array(jobEventArb, { minLength: 40, maxLength: 40 })], { numRuns })(
    'for each machine, a refused event leaves value and context as they were (transition() and a live actor)',
    (events, probes) => {
      for (const machine of [jobMachine, jobRunMachine] as const) {
        const live = createActor(machine).start();
        let [snapshot] = initialTransition(machine);
        for (const [index, event] of events.entries()) {
          // Offer the state an unrelated event too: more refusals, from more states.
          const probe = probes[index];
          if (probe !== undefined && !snapshot.can(probe as never)) {
            const [after] = transition(machine, snapshot as never, probe as never);
            expect(view(after)).toEqual(view(snapshot));
          }
          const before = view(live.getSnapshot());
          const refused = !snapshot.can(event as never);
          [snapshot] = transition(machine, snapshot as never, event as never);
          live.send(event as never);
          if (refused) {
            expect(view(snapshot)).toEqual(before);
            expect(view(live.getSnapshot())).toEqual(before);
          }
        }
        live.stop();
      }
    },
  );
});

describe('never two open runs', () => {
  fcTest.prop([jobEventSequenceArb], { numRuns })(
    'a job is claimed at most once, only from queued; its run id changes only then; running job <=> running run',
    (events) => {
      const { steps } = foldAggregate(events);
      let claims = 0;
      for (const { before, event, after } of steps) {
        const state = after ?? before;
        expect(state.job.value === 'running', `${state.job.value}/${state.run.value}`).toBe(state.run.value === 'running');
        if (after === null) continue;
        if (event.type === 'job.claimed') {
          claims += 1;
          expect(before.job.value).toBe('queued');
          expect(before.run.value).toBe('none');
          expect(after.run.context.run_id).toBe(event.data.run_id);
        }
        if (after.run.context.run_id !== before.run.context.run_id) {
          expect(event.type).toBe('job.claimed');
          expect(before.job.value).toBe('queued');
        }
      }
      expect(claims).toBeLessThanOrEqual(1);

      // Each machine alone: the Job machine takes a claim only in queued, the JobRun machine
      // only before its run exists (a run is the job's single attempt, 1:1).
      let [job] = initialTransition(jobMachine);
      let [run] = initialTransition(jobRunMachine);
      for (const event of events) {
        if (event.type === 'job.claimed') {
          expect(job.can(event), `claim in ${job.value}`).toBe(job.value === 'queued' && Date.parse(event.time) >= Date.parse(job.context.run_at));
          expect(run.can(event), `claim in ${run.value}`).toBe(run.value === 'none');
        }
        const runIdBefore = run.context.run_id;
        [job] = transition(jobMachine, job, event);
        [run] = transition(jobRunMachine, run, event);
        if (run.context.run_id !== runIdBefore) expect(runIdBefore === null && event.type === 'job.claimed').toBe(true);
      }
    },
  );

  fcTest.prop([jobEventSequenceArb], { numRuns })('while a run is open, a claim by any run id at any later time is refused', (events) => {
    const { steps } = foldAggregate(events);
    for (const { event, after } of steps) {
      if (after === null || after.run.value !== 'running') continue;
      for (const runId of RUN_IDS) {
        for (const time of [event.time, new Date(Date.parse(event.time) + 86_400_000).toISOString()]) {
          const claim = jobEvent('job.claimed', { run_id: runId, worker: 'w9', host: 'h9', pid: 9, version: '9', lease_ms: 1000 }, { time });
          expect(decideJob(after, claim)).toMatchObject({ ok: false, code: 'invalid_transition' });
          expect(evolveJob(after, claim)).toBeNull();
        }
      }
    }
  });
});

describe('terminal states', () => {
  fcTest.prop([jobEventSequenceArb], { numRuns })(
    'a terminal job accepts only job.artifact_added (nothing changes) and job.removed (only its status changes, to removed), alone and in the aggregate',
    (events) => {
      // The aggregate.
      for (const { before, event, after } of foldAggregate(events).steps) {
        if (!isTerminalJob(before.job.value) || after === null) continue;
        expect(['job.artifact_added', 'job.removed']).toContain(event.type);
        if (event.type === 'job.removed') expect(after.job).toEqual({ value: 'removed', context: before.job.context });
        else expect(after.job).toEqual(before.job);
      }
      // The Job machine alone, which sees events the JobRun machine would refuse.
      let [snapshot] = initialTransition(jobMachine);
      for (const event of events) {
        const wasTerminal = isTerminalJob(snapshot.value);
        const accepted = snapshot.can(event);
        const [next] = transition(jobMachine, snapshot, event);
        if (wasTerminal) {
          if (accepted && event.type === 'job.removed') {
            expect(view(next)).toEqual({ value: 'removed', context: snapshot.context });
          } else {
            expect(isTerminalJob(next.value)).toBe(true);
            if (accepted) expect(event.type).toBe('job.artifact_added');
            expect(view(next)).toEqual(view(snapshot));
          }
        }
        snapshot = next;
      }
    },
  );

  fcTest.prop([jobEventSequenceArb], { numRuns })(
    'job.removed is accepted exactly from waiting, queued and the terminal states (never running), and removed absorbs every event',
    (events) => {
      for (const { before, event, after } of foldAggregate(events).steps) {
        if (before.job.value === 'removed') {
          expect(after, `${event.type} after removed`).toBeNull();
          continue;
        }
        if (event.type !== 'job.removed') continue;
        const removable = before.job.value === 'waiting' || before.job.value === 'queued' || isTerminalJob(before.job.value);
        expect(after !== null, `job.removed in ${before.job.value}/${before.run.value}`).toBe(removable);
        if (after === null) continue;
        expect(after.job.value).toBe('removed');
        // The run is kept as it was: a closed run is write-once, and none is ever open here.
        expect(after.run).toEqual(before.run);
        expect(after.job.context.finished_at).toBe(before.job.context.finished_at ?? event.time);
      }
    },
  );

  fcTest.prop([jobEventSequenceArb], { numRuns })(
    'a terminal run is write-once: only artifacts are appended (a removal of its job changes nothing), nothing else changes (seed 002 INV-002)',
    (events) => {
      const check = (beforeValue: RunStatus, before: RunContext, event: JobEvent, accepted: boolean, afterValue: RunStatus, after: RunContext) => {
        expect(afterValue).toBe(beforeValue);
        expect(withoutArtifacts(after)).toEqual(withoutArtifacts(before));
        if (accepted && event.type === 'job.artifact_added') expect(after.artifacts).toEqual([...before.artifacts, event.data.artifact]);
        else expect(after.artifacts).toEqual(before.artifacts);
      };
      for (const { before, event, after } of foldAggregate(events).steps) {
        if (!isTerminalRun(before.run.value) || after === null) continue;
        // A removal of the job leaves its closed run as it is.
        expect(['job.artifact_added', 'job.removed']).toContain(event.type);
        check(before.run.value, before.run.context, event, true, after.run.value, after.run.context);
      }
      // The JobRun machine alone.
      let [snapshot] = initialTransition(jobRunMachine);
      for (const event of events) {
        const [next] = transition(jobRunMachine, snapshot, event);
        if (isTerminalRun(snapshot.value as RunStatus)) {
          const accepted = snapshot.can(event);
          if (accepted) expect(['job.artifact_added', 'job.removed']).toContain(event.type);
          check(snapshot.value as RunStatus, snapshot.context, event, accepted, next.value as RunStatus, next.context);
        }
        snapshot = next;
      }
    },
  );
});

describe('decide and evolve agree', () => {
  fcTest.prop([jobEventSequenceArb, fc.array(jobEventArb, { minLength: 40, maxLength: 40 })], { numRuns })(
    'decideJob(state, e).ok === (evolveJob(state, e) !== null), for every reached state and event',
    (events, probes) => {
      const { steps } = foldAggregate(events);
      for (const [index, { before, event }] of steps.entries()) {
        const probe = probes[index];
        for (const candidate of probe === undefined ? [event] : [event, probe]) {
          const decision = decideJob(before, candidate);
          expect(decision.ok, `${candidate.type} in ${before.job.value}/${before.run.value}`).toBe(evolveJob(before, candidate) !== null);
          if (decision.ok) {
            expect(decision.event).toBe(candidate);
          } else if (decision.code === 'stale_run') {
            // Fencing is about an event naming a run; a claim opens one and is never stale.
            expect(candidate.type).not.toBe('job.claimed');
            expect('run_id' in candidate.data && typeof candidate.data.run_id === 'string').toBe(true);
          }
        }
      }
    },
  );
});

describe('the generator is not vacuous', () => {
  test('a fixed sample of histories reaches every pair of statuses, accepts every event type and refuses with both codes', () => {
    const histories = fc.sample(jobEventSequenceArb, { numRuns: 500, seed: 42 });
    const pairs = new Set<string>();
    const acceptedTypes = new Set<string>();
    const refusals = new Set<string>();
    let total = 0;
    let accepted = 0;
    for (const events of histories) {
      for (const { before, event, after } of foldAggregate(events).steps) {
        total += 1;
        const state = after ?? before;
        pairs.add(`${state.job.value}/${state.run.value}`);
        if (after !== null) {
          accepted += 1;
          acceptedTypes.add(event.type);
        } else {
          const decision = decideJob(before, event);
          if (!decision.ok) refusals.add(decision.code);
        }
      }
    }
    // Exactly the pairs the two machines can be in together; any other would be a running job
    // without its run or a run outliving its job.
    expect([...pairs].sort()).toEqual(
      [
        'new/none',
        'waiting/none',
        'queued/none',
        'running/running',
        'succeeded/completed',
        'failed/failed',
        'cancelled/failed',
        'cancelled/none',
        'skipped/none',
        'skipped/skipped',
        'ignored/none',
        'removed/none',
        'removed/completed',
        'removed/failed',
        'removed/skipped',
      ].sort(),
    );
    expect([...acceptedTypes].sort()).toEqual([...JOB_EVENT_TYPES].sort());
    expect([...refusals].sort()).toEqual(['invalid_transition', 'stale_run']);
    expect(accepted / total).toBeGreaterThan(0.1);
  });
});
