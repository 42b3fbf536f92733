/**
 * Example tests of the job aggregate (Job + JobRun machines on one subject), written
 * given(events).when(event).then(accepted | rejected(code)). `then` checks that the decider
 * (`decideJob`, which asks the machines) and the fast fold (`evolveJob`) give the same answer.
 */
import { describe, expect, test } from 'vitest';
import { JOB_EVENT_TYPES, type JobEvent } from '../../machines/job.events.js';
import { decideJob, evolveJob, INITIAL_JOB_STATE, type JobState } from '../../machines/job.aggregate.js';
import { TERMINAL_JOB_STATUSES } from '../../machines/job.machine.js';
import { at, JOB_ID, jobEvent, QUEUE, type JobEventDataOf } from '../support/arbitraries.js';

// ---------------------------------------------------------------------------------------------
// Builders: one event of each type with plausible defaults; `t` is seconds after BASE_TIME.

function submitted(t = 0, data: Partial<JobEventDataOf<'job.submitted'>> = {}): JobEvent {
  return jobEvent(
    'job.submitted',
    {
      job_id: JOB_ID,
      key: { subject_id: 42, session: 3 },
      params: { size: 128 },
      priority: 5,
      position: 0,
      run_at: at(t * 1000),
      max_attempts: 3,
      backoff: { base_ms: 1000, max_ms: 60_000, jitter: 0.2 },
      attempt: 1,
      retry_of: null,
      waiting: false,
      ...data,
    },
    { time: at(t * 1000) },
  );
}
const released = (t = 1): JobEvent => jobEvent('job.released', {}, { time: at(t * 1000) });
const moved = (priority: number, position: number, t = 1): JobEvent => jobEvent('job.moved', { priority, position }, { time: at(t * 1000) });
const claimed = (runId: string, t = 2): JobEvent =>
  jobEvent('job.claimed', { run_id: runId, worker: 'w1', host: 'host-a', pid: 4242, version: '1.0.0', lease_ms: 30_000 }, { time: at(t * 1000) });
const succeeded = (runId: string, t = 3): JobEvent =>
  jobEvent('job.succeeded', { run_id: runId, result: { ok: true }, exit_code: 0 }, { time: at(t * 1000) });
const failed = (runId: string, t = 3): JobEvent =>
  jobEvent('job.failed', { run_id: runId, reason: 'error', error: { message: 'boom' } }, { time: at(t * 1000) });
const cancelled = (t = 3): JobEvent => jobEvent('job.cancelled', { reason: 'operator' }, { time: at(t * 1000) });
const ignored = (t = 1): JobEvent => jobEvent('job.ignored', { reason: 'not needed' }, { time: at(t * 1000) });
const skipped = (runId: string | null, t = 3): JobEvent => jobEvent('job.skipped', { run_id: runId, reason: 'nothing to do' }, { time: at(t * 1000) });
const removed = (t = 5): JobEvent => jobEvent('job.removed', { reason: 'cleaned' }, { time: at(t * 1000) });
const artifact = (runId: string, name: string, t = 4): JobEvent =>
  jobEvent('job.artifact_added', { run_id: runId, artifact: { name, uri: `s3://bucket/${name}` } }, { time: at(t * 1000) });

/** One event of every type, the run ones naming `runId`: for "everything is refused" checks. */
function oneOfEachType(runId: string, t: number): JobEvent[] {
  const events = [
    submitted(t),
    released(t),
    moved(1, 1, t),
    claimed(runId, t),
    succeeded(runId, t),
    failed(runId, t),
    cancelled(t),
    ignored(t),
    skipped(runId, t),
    artifact(runId, 'late.txt', t),
    removed(t),
  ];
  expect(events.map((e) => e.type)).toEqual([...JOB_EVENT_TYPES]);
  return events;
}

// ---------------------------------------------------------------------------------------------
// given / when / then

type Expected = { readonly ok: true } | { readonly ok: false; readonly code: 'invalid_transition' | 'stale_run' };
const accepted: Expected = { ok: true };
const rejected = (code: 'invalid_transition' | 'stale_run'): Expected => ({ ok: false, code });

/** Folds `events`, each of which must be accepted (a refused setup would make the test vacuous). */
function given(...events: JobEvent[]) {
  let state: JobState = INITIAL_JOB_STATE;
  for (const event of events) {
    const decision = decideJob(state, event);
    expect(decision, `given ${event.type} at ${event.time}`).toMatchObject({ ok: true });
    const next = evolveJob(state, event);
    expect(next, `given ${event.type} at ${event.time}`).not.toBeNull();
    state = next as JobState;
  }
  return {
    state,
    when(event: JobEvent) {
      return {
        /** Asserts the outcome; returns the state after it (unchanged when rejected). */
        then(expected: Expected): JobState {
          const decision = decideJob(state, event);
          const next = evolveJob(state, event);
          if (expected.ok) {
            expect(decision).toEqual({ ok: true, event });
            expect(next).not.toBeNull();
            return next as JobState;
          }
          expect(decision).toMatchObject({ ok: false, code: expected.code });
          expect(next).toBeNull();
          return state;
        },
      };
    },
  };
}

// ---------------------------------------------------------------------------------------------

describe('job aggregate: submit and release', () => {
  test('a submit puts a new job in queued, with no run', () => {
    const after = given().when(submitted(0, { priority: 2, position: 7 })).then(accepted);
    expect(after.job.value).toBe('queued');
    expect(after.run.value).toBe('none');
    expect(after.job.context).toMatchObject({
      job_id: JOB_ID,
      queue: QUEUE,
      priority: 2,
      position: 7,
      params: { size: 128 },
      created_at: at(0),
      run_at: at(0),
      finished_at: null,
    });
  });

  test('a second submit of the same job is refused', () => {
    given(submitted()).when(submitted(5)).then(rejected('invalid_transition'));
  });

  test('a submit with waiting holds the job in waiting until job.released puts it in queued', () => {
    const waiting = given().when(submitted(0, { waiting: true })).then(accepted);
    expect(waiting.job.value).toBe('waiting');
    given(submitted(0, { waiting: true })).when(claimed('r1', 10)).then(rejected('invalid_transition'));
    const queued = given(submitted(0, { waiting: true })).when(released(1)).then(accepted);
    expect(queued.job.value).toBe('queued');
    expect(queued.job.context).toEqual(waiting.job.context);
  });

  test('job.released is refused for a job that is not waiting', () => {
    given(submitted()).when(released()).then(rejected('invalid_transition'));
  });

  test('job.moved changes priority and position while queued, and is refused once running', () => {
    const after = given(submitted()).when(moved(0, -3)).then(accepted);
    expect(after.job.value).toBe('queued');
    expect(after.job.context).toMatchObject({ priority: 0, position: -3 });
    given(submitted(), claimed('r1')).when(moved(0, -3, 5)).then(rejected('invalid_transition'));
  });
});

describe('job aggregate: claim', () => {
  test('a claim before run_at is refused', () => {
    given(submitted(0, { run_at: at(60_000) }))
      .when(claimed('r1', 59))
      .then(rejected('invalid_transition'));
  });

  test('a claim exactly at run_at is accepted', () => {
    const after = given(submitted(0, { run_at: at(60_000) }))
      .when(claimed('r1', 60))
      .then(accepted);
    expect(after.job.value).toBe('running');
  });

  test('a claim puts the job in running and opens its run', () => {
    const after = given(submitted()).when(claimed('r1', 2)).then(accepted);
    expect(after.job.value).toBe('running');
    expect(after.run.value).toBe('running');
    expect(after.run.context).toMatchObject({
      run_id: 'r1',
      worker: 'w1',
      host: 'host-a',
      pid: 4242,
      version: '1.0.0',
      lease_ms: 30_000,
      started_at: at(2000),
      finished_at: null,
      artifacts: [],
    });
  });

  test('a claim while running is refused: never a second open run', () => {
    const before = given(submitted(), claimed('r1'));
    const after = before.when(claimed('r2', 5)).then(rejected('invalid_transition'));
    expect(after.run.context.run_id).toBe('r1');
    before.when(claimed('r1', 5)).then(rejected('invalid_transition'));
  });
});

describe('job aggregate: completion and fencing', () => {
  test('the run holding the job completes it', () => {
    const after = given(submitted(), claimed('r1')).when(succeeded('r1', 9)).then(accepted);
    expect(after.job.value).toBe('succeeded');
    expect(after.run.value).toBe('completed');
    expect(after.job.context.finished_at).toBe(at(9000));
    expect(after.run.context).toMatchObject({ finished_at: at(9000), result: { ok: true }, exit_code: 0 });
  });

  test('a completion by another run id is refused with stale_run', () => {
    given(submitted(), claimed('r1')).when(succeeded('r2')).then(rejected('stale_run'));
    given(submitted(), claimed('r1')).when(failed('r2')).then(rejected('stale_run'));
  });

  test('a second completion by the run that already completed is refused', () => {
    given(submitted(), claimed('r1'), succeeded('r1')).when(failed('r1', 5)).then(rejected('stale_run'));
  });

  test('a failure records its reason on the job and its error on the run', () => {
    const after = given(submitted(), claimed('r1')).when(failed('r1', 7)).then(accepted);
    expect(after.job.value).toBe('failed');
    expect(after.job.context.end_reason).toBe('error');
    expect(after.run.value).toBe('failed');
    expect(after.run.context).toMatchObject({ failure_reason: 'error', error: { message: 'boom' }, finished_at: at(7000) });
  });

  test('a running job is skipped only by its own run', () => {
    given(submitted(), claimed('r1')).when(skipped(null)).then(rejected('invalid_transition'));
    given(submitted(), claimed('r1')).when(skipped('r2')).then(rejected('stale_run'));
    const after = given(submitted(), claimed('r1')).when(skipped('r1')).then(accepted);
    expect(after.job.value).toBe('skipped');
    expect(after.run.value).toBe('skipped');
  });
});

describe('job aggregate: cancel, ignore, terminal states', () => {
  test('cancelling a succeeded job is refused', () => {
    given(submitted(), claimed('r1'), succeeded('r1')).when(cancelled(5)).then(rejected('invalid_transition'));
  });

  test('cancelling a running job cancels the job and fails its run with failure_reason cancelled', () => {
    const after = given(submitted(), claimed('r1')).when(cancelled(6)).then(accepted);
    expect(after.job.value).toBe('cancelled');
    expect(after.job.context).toMatchObject({ finished_at: at(6000), end_reason: 'operator' });
    expect(after.run.value).toBe('failed');
    expect(after.run.context).toMatchObject({ run_id: 'r1', failure_reason: 'cancelled', finished_at: at(6000) });
  });

  test('cancelling a queued job ends it without a run', () => {
    const after = given(submitted()).when(cancelled(1)).then(accepted);
    expect(after.job.value).toBe('cancelled');
    expect(after.run.value).toBe('none');
  });

  test('an artifact after completion is accepted from its run and refused from another run', () => {
    const done = given(submitted(), claimed('r1'), succeeded('r1'));
    const after = done.when(artifact('r1', 'thumb.png')).then(accepted);
    expect(after.job.value).toBe('succeeded');
    expect(after.job.context).toEqual(done.state.job.context);
    expect(after.run.value).toBe('completed');
    expect(after.run.context.artifacts).toEqual([{ name: 'thumb.png', uri: 's3://bucket/thumb.png' }]);
    expect({ ...after.run.context, artifacts: [] }).toEqual(done.state.run.context);
    done.when(artifact('r2', 'thumb.png')).then(rejected('stale_run'));
  });

  test('artifacts append in order while running', () => {
    const after = given(submitted(), claimed('r1'), artifact('r1', 'a.txt', 3)).when(artifact('r1', 'b.txt', 4)).then(accepted);
    expect(after.job.value).toBe('running');
    expect(after.run.context.artifacts.map((a) => a.name)).toEqual(['a.txt', 'b.txt']);
  });

  test('ignored is terminal: every event but a removal is refused after it', () => {
    const ignoredJob = given(submitted()).when(ignored()).then(accepted);
    expect(ignoredJob.job.value).toBe('ignored');
    expect(ignoredJob.run.value).toBe('none');
    for (const event of oneOfEachType('r1', 3600).filter((e) => e.type !== 'job.removed')) {
      const decision = decideJob(ignoredJob, event);
      expect(decision.ok, event.type).toBe(false);
      // An event naming a run may be answered stale_run (no run holds the job); any other is invalid.
      if (!('run_id' in event.data) || event.type === 'job.claimed') expect(decision).toMatchObject({ code: 'invalid_transition' });
      expect(evolveJob(ignoredJob, event), event.type).toBeNull();
    }
  });

  test('every terminal status refuses every event but a closed run appending artifacts, and a removal', () => {
    const terminal: Record<string, JobEvent[]> = {
      succeeded: [submitted(), claimed('r1'), succeeded('r1')],
      failed: [submitted(), claimed('r1'), failed('r1')],
      'cancelled while running': [submitted(), claimed('r1'), cancelled()],
      'cancelled while queued': [submitted(), cancelled()],
      'skipped by its run': [submitted(), claimed('r1'), skipped('r1')],
      'skipped while queued': [submitted(), skipped(null)],
      ignored: [submitted(), ignored()],
    };
    for (const [name, history] of Object.entries(terminal)) {
      const { state } = given(...history);
      expect(TERMINAL_JOB_STATUSES, name).toContain(state.job.value);
      const hadRun = state.run.value !== 'none';
      for (const event of oneOfEachType('r1', 3600)) {
        const shouldAccept = (event.type === 'job.artifact_added' && hadRun) || event.type === 'job.removed';
        expect(decideJob(state, event).ok, `${name}: ${event.type}`).toBe(shouldAccept);
        const next = evolveJob(state, event);
        expect(next === null, `${name}: ${event.type}`).toBe(!shouldAccept);
        if (next && event.type === 'job.removed') {
          // Removed: only the status changes; the job's ending and its closed run are kept.
          expect(next.job, name).toEqual({ value: 'removed', context: state.job.context });
          expect(next.run, name).toBe(state.run);
        } else if (next) expect(next.job, `${name}: ${event.type}`).toEqual(state.job);
      }
    }
  });
});

describe('job aggregate: removal (job.removed)', () => {
  test('a waiting or queued job is removed, with no run; its finished_at is the removal time', () => {
    for (const history of [[submitted(0, { waiting: true })], [submitted(0)], [submitted(0, { run_at: at(600_000) })]]) {
      const after = given(...history).when(removed(7)).then(accepted);
      expect(after.job.value).toBe('removed');
      expect(after.run.value).toBe('none');
      expect(after.job.context.finished_at).toBe(at(7000));
    }
  });

  test('a running job is never removed: its run holds it', () => {
    given(submitted(), claimed('r1')).when(removed()).then(rejected('invalid_transition'));
    const refusal = decideJob(given(submitted(), claimed('r1')).state, removed());
    expect(refusal).toMatchObject({ ok: false, reason: expect.stringMatching(/^cannot remove job \S+: it is running$/) });
  });

  test('removed is final: every event is refused after it, a second removal too ("already removed")', () => {
    const gone = given(submitted(), claimed('r1'), succeeded('r1')).when(removed()).then(accepted);
    expect(gone.job.value).toBe('removed');
    // The closed run is kept as it was (write-once).
    expect(gone.run.value).toBe('completed');
    for (const event of oneOfEachType('r1', 3600)) {
      expect(decideJob(gone, event).ok, event.type).toBe(false);
      expect(evolveJob(gone, event), event.type).toBeNull();
    }
    expect(decideJob(gone, removed())).toMatchObject({ ok: false, code: 'invalid_transition', reason: expect.stringContaining('already removed') });
  });
});
