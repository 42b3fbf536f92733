/**
 * The refresh planner (src/jobsets/plan.ts) against seed 000's rules, written here a second time
 * as plain loops over arrays (the model), on random sources, targets, jobs and settings: what it
 * adds, re-pends and removes, its counts and order, and that planning again right after applying
 * its plan changes nothing.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect, expectTypeOf, test } from 'vitest';
import type { JobRecord } from '../../src/store/job-store.js';
import type { Key } from '../../src/jobsets/key.js';
import { jobSetStatusOf, missingKeys, planRefresh, type JobSetStatus, type PlanJob, type RefreshPlan } from '../../src/jobsets/plan.js';
import type { Restriction, RestrictionTerm } from '../../src/jobsets/restrict.js';
import type { ResolvedRefreshSettings } from '../../src/jobsets/settings.js';
import { planJobOf, type PlannableRecord } from '../../src/jobsets/plan-jobs.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 300);
const NOW = 10_000_000_000;

// ---- the model: seed 000's rules as plain loops ----

const sameKey = (a: Key | string, b: Key | string): boolean => {
  if (typeof a === 'string' || typeof b === 'string') return a === b;
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
};
const inSource = (key: Key | string, source: readonly Key[]) => source.some((s) => sameKey(s, key));
/** A target row matches when it has every attribute of the key with the same value. */
const inTarget = (key: Key, target: readonly Key[]) => target.some((row) => Object.keys(key).every((k) => Object.hasOwn(row, k) && row[k] === key[k]));
const termMatches = (key: Key, term: RestrictionTerm) => Object.entries(term).every(([k, v]) => Object.hasOwn(key, k) && key[k] === v);
const within = (key: Key, restrict: Restriction | undefined) =>
  restrict === undefined ? true : Array.isArray(restrict) ? (restrict as RestrictionTerm[]).some((t) => termMatches(key, t)) : termMatches(key, restrict as RestrictionTerm);
const holding = (s: JobSetStatus) => s === 'pending' || s === 'reserved' || s === 'ignore';

/** The job set after a plan: its removals gone, its submits added as pending jobs created now. */
function applyPlan(jobs: readonly PlanJob[], plan: RefreshPlan, nowMs: number): PlanJob[] {
  const removed = new Set<string>();
  const added: PlanJob[] = [];
  const submit = (key: Key) => added.push({ jobId: `new-${added.length}-${nowMs}`, key, status: 'pending', createdAtMs: nowMs });
  for (const action of plan.actions) {
    if (action.type === 'add') submit(action.key);
    else if (action.type === 're_pend') {
      for (const id of action.removeJobIds) removed.add(id);
      submit(action.key);
    } else if (action.type === 'remove_stale') removed.add(action.jobId);
    else {
      removed.add(action.jobId);
      if (action.reAdd) submit(action.key!);
    }
  }
  return [...jobs.filter((j) => !removed.has(j.jobId)), ...added];
}

// ---- arbitraries: a small key universe so sources, targets and jobs overlap ----

const keyArb: fc.Arbitrary<Key> = fc.record({ a: fc.integer({ min: 0, max: 4 }), b: fc.constantFrom('x', 'y') });
/** Target rows: some with an extra attribute (DataJoint's legacy non-FK primary key part). */
const targetRowArb: fc.Arbitrary<Key> = fc.oneof(keyArb, fc.record({ a: fc.integer({ min: 0, max: 4 }), b: fc.constantFrom('x', 'y'), method: fc.constantFrom('m1', 'm2') }));
const statusArb = fc.constantFrom<JobSetStatus>('pending', 'reserved', 'success', 'error', 'ignore');
const restrictArb: fc.Arbitrary<Restriction | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.record({ a: fc.integer({ min: 0, max: 4 }) }),
  fc.array(fc.oneof(fc.record({ a: fc.integer({ min: 0, max: 4 }) }), fc.record({ b: fc.constantFrom('x', 'y') })), { maxLength: 3 }),
  fc.constant({ typo: 1 }),
);
const settingsArb: fc.Arbitrary<ResolvedRefreshSettings> = fc.record({
  keepCompleted: fc.boolean(),
  staleTimeoutS: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5_000 })),
  orphanTimeoutS: fc.oneof(fc.constant(null), fc.integer({ min: 1, max: 5_000 })),
  priority: fc.integer({ min: 0, max: 255 }),
  delayMs: fc.integer({ min: 0, max: 100_000 }),
});

/** Jobs per key as a job set can hold them: any number of ended jobs, at most one pending, running or ignored. */
const jobsArb: fc.Arbitrary<PlanJob[]> = fc
  .array(fc.record({ key: keyArb, status: statusArb, age: fc.integer({ min: 0, max: 10_000 }), reservedAgo: fc.integer({ min: 0, max: 10_000 }) }), { maxLength: 25 })
  .map((raw) => {
    const jobs: PlanJob[] = [];
    for (const [i, r] of raw.entries()) {
      if (holding(r.status) && jobs.some((j) => sameKey(j.key, r.key) && holding(j.status))) continue;
      const createdAtMs = NOW - r.age * 1000;
      jobs.push({ jobId: `j${i}`, key: r.key, status: r.status, createdAtMs, reservedAtMs: r.status === 'reserved' ? Math.max(createdAtMs, NOW - r.reservedAgo * 1000) : null });
    }
    return jobs;
  });

const caseArb = fc.record({
  source: fc.array(keyArb, { maxLength: 12 }),
  target: fc.array(targetRowArb, { maxLength: 8 }),
  jobs: jobsArb,
  restrict: restrictArb,
  settings: settingsArb,
});

describe('planRefresh against seed 000', () => {
  fcTest.prop([caseArb], { numRuns })('adds exactly the restricted source keys outside the target that have no job', ({ source, target, jobs, restrict, settings }) => {
    const plan = planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW });
    const adds = plan.actions.filter((a) => a.type === 'add').map((a) => a.key);
    const expected = source.filter((k, i) => within(k, restrict) && !inTarget(k, target) && !jobs.some((j) => sameKey(j.key, k)) && source.findIndex((s) => sameKey(s, k)) === i);
    expect(adds).toEqual(expected);
    expect(plan.counts.added).toBe(expected.length);
    expect(plan.priority).toBe(settings.priority);
    expect(plan.runAtMs).toBe(NOW + settings.delayMs);
  });

  fcTest.prop([caseArb], { numRuns })('after applying the plan every restricted source key outside the target has a job, and at most one pending, running or ignored', ({ source, target, jobs, restrict, settings }) => {
    const after = applyPlan(jobs, planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW }), NOW);
    for (const key of source) {
      const mine = after.filter((j) => sameKey(j.key, key));
      if (within(key, restrict) && !inTarget(key, target)) expect(mine.length).toBeGreaterThan(0);
      expect(mine.filter((j) => holding(j.status)).length).toBeLessThanOrEqual(1);
      if (within(key, restrict) && !inTarget(key, target) && !jobs.some((j) => sameKey(j.key, key))) expect(mine.map((j) => j.status)).toEqual(['pending']);
    }
  });

  fcTest.prop([caseArb], { numRuns })('nothing ignored is ever removed', ({ source, target, jobs, restrict, settings }) => {
    const after = applyPlan(jobs, planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW }), NOW);
    for (const job of jobs.filter((j) => j.status === 'ignore')) expect(after).toContainEqual(job);
  });

  fcTest.prop([caseArb], { numRuns })('stale removals are exactly the jobs (not ignored) older than stale_timeout_s whose key left the whole source', ({ source, target, jobs, restrict, settings }) => {
    const plan = planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW });
    const removed = plan.actions.flatMap((a) => (a.type === 'remove_stale' ? [a.jobId] : []));
    const expected =
      settings.staleTimeoutS === 0 ? [] : jobs.filter((j) => j.status !== 'ignore' && j.createdAtMs < NOW - settings.staleTimeoutS * 1000 && !inSource(j.key, source)).map((j) => j.jobId);
    expect(removed).toEqual(expected);
    expect(plan.counts.removed).toBe(expected.length);
  });

  fcTest.prop([caseArb], { numRuns })('orphans are exactly the running jobs claimed longer than orphan_timeout_s ago (not stale), re-added only when still wanted', ({ source, target, jobs, restrict, settings }) => {
    const plan = planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW });
    const stale = new Set(plan.actions.flatMap((a) => (a.type === 'remove_stale' ? [a.jobId] : [])));
    const orphans = plan.actions.flatMap((a) => (a.type === 'orphan' ? [a] : []));
    const expected =
      settings.orphanTimeoutS === null
        ? []
        : jobs.filter((j) => j.status === 'reserved' && !stale.has(j.jobId) && (j.reservedAtMs ?? j.createdAtMs) < NOW - settings.orphanTimeoutS! * 1000).map((j) => j.jobId);
    expect(orphans.map((o) => o.jobId)).toEqual(expected);
    expect(plan.counts.orphaned).toBe(expected.length);
    for (const orphan of orphans) {
      const job = jobs.find((j) => j.jobId === orphan.jobId)!;
      const wanted = inSource(job.key, source) && !inTarget(job.key as Key, target);
      expect(orphan.reAdd).toBe(wanted);
    }
  });

  fcTest.prop([caseArb], { numRuns })('re-pends only with keep_completed, only keys within restrict in the source and outside the target whose latest job succeeded', ({ source, target, jobs, restrict, settings }) => {
    const plan = planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW });
    const rePends = plan.actions.flatMap((a) => (a.type === 're_pend' ? [a] : []));
    expect(plan.counts.re_pended).toBe(rePends.length);
    if (!settings.keepCompleted) expect(rePends).toEqual([]);
    for (const r of rePends) {
      expect(within(r.key, restrict) && inSource(r.key, source) && !inTarget(r.key, target)).toBe(true);
      const mine = jobs.filter((j) => sameKey(j.key, r.key));
      expect(mine.some((j) => holding(j.status))).toBe(false);
      expect(r.removeJobIds).toEqual(mine.filter((j) => j.status === 'success').map((j) => j.jobId));
      expect(r.removeJobIds.length).toBeGreaterThan(0);
    }
    // Completeness: a key whose every job succeeded, wanted and not held, is re-pended.
    if (settings.keepCompleted) {
      for (const key of source) {
        const mine = jobs.filter((j) => sameKey(j.key, key));
        if (mine.length > 0 && mine.every((j) => j.status === 'success') && within(key, restrict) && !inTarget(key, target)) {
          expect(rePends.some((r) => sameKey(r.key, key))).toBe(true);
        }
      }
    }
  });

  fcTest.prop([caseArb], { numRuns })("actions come in seed 000's order", ({ source, target, jobs, restrict, settings }) => {
    const order = { add: 0, re_pend: 1, remove_stale: 2, orphan: 3 } as const;
    const ranks = planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW }).actions.map((a) => order[a.type]);
    expect(ranks).toEqual([...ranks].sort((x, y) => x - y));
  });

  fcTest.prop([caseArb], { numRuns })('planning again right after applying a plan does nothing', ({ source, target, jobs, restrict, settings }) => {
    const after = applyPlan(jobs, planRefresh({ source, target, jobs, restrict, settings, nowMs: NOW }), NOW);
    const again = planRefresh({ source, target, jobs: after, restrict, settings, nowMs: NOW });
    expect(again.actions).toEqual([]);
    expect(again.counts).toEqual({ added: 0, removed: 0, orphaned: 0, re_pended: 0 });
  });
});

describe('missingKeys (direct mode, remaining)', () => {
  fcTest.prop([caseArb], { numRuns })('is the restricted source minus the target, once each, in source order', ({ source, target, restrict }) => {
    const expected = source.filter((k, i) => within(k, restrict) && !inTarget(k, target) && source.findIndex((s) => sameKey(s, k)) === i);
    expect(missingKeys(source, target, restrict)).toEqual(expected);
  });

  fcTest.prop([caseArb], { numRuns })('a refresh into an empty job set adds exactly the missing keys', ({ source, target, restrict, settings }) => {
    const adds = planRefresh({ source, target, jobs: [], restrict, settings, nowMs: NOW }).actions.flatMap((a) => (a.type === 'add' ? [a.key] : []));
    expect(adds).toEqual(missingKeys(source, target, restrict));
  });
});

describe('planRefresh examples from seed 000', () => {
  const settings: ResolvedRefreshSettings = { keepCompleted: false, staleTimeoutS: 3600, orphanTimeoutS: null, priority: 5, delayMs: 0 };
  const job = (jobId: string, key: Key, status: JobSetStatus, ageS: number): PlanJob => ({ jobId, key, status, createdAtMs: NOW - ageS * 1000, reservedAtMs: status === 'reserved' ? NOW - ageS * 1000 : null });

  test('a worker that crashed after writing its target row: the orphan is removed and not added again', () => {
    const plan = planRefresh({ source: [{ id: 1 }], target: [{ id: 1 }], jobs: [job('j1', { id: 1 }, 'reserved', 7200)], settings: { ...settings, orphanTimeoutS: 3600 }, nowMs: NOW });
    expect(plan.actions).toEqual([{ type: 'orphan', jobId: 'j1', identity: '{"id":1}', key: { id: 1 }, reAdd: false }]);
    expect(plan.counts).toEqual({ added: 0, removed: 0, orphaned: 1, re_pended: 0 });
  });

  test('a restricted refresh adds only within its restriction and calls nothing outside it stale', () => {
    const plan = planRefresh({
      source: [{ id: 1, lab: 'smith' }, { id: 2, lab: 'jones' }, { id: 3, lab: 'jones' }],
      restrict: { lab: 'smith' },
      jobs: [job('j2', { id: 2, lab: 'jones' }, 'pending', 99_999)],
      settings,
      nowMs: NOW,
    });
    expect(plan.actions).toEqual([{ type: 'add', key: { id: 1, lab: 'smith' }, identity: '{"id":1,"lab":"smith"}' }]);
  });

  test('stale_timeout_s 0 skips stale cleanup; otherwise only jobs older than it go', () => {
    const jobs = [job('old', { id: 9 }, 'error', 7200), job('young', { id: 8 }, 'pending', 60), job('ign', { id: 7 }, 'ignore', 99_999)];
    expect(planRefresh({ source: [], jobs, settings: { ...settings, staleTimeoutS: 0 }, nowMs: NOW }).actions).toEqual([]);
    expect(planRefresh({ source: [], jobs, settings, nowMs: NOW }).actions).toEqual([{ type: 'remove_stale', jobId: 'old', identity: '{"id":9}' }]);
  });

  test('a target row with an extra attribute (a legacy non-FK primary key part) covers the key', () => {
    const plan = planRefresh({ source: [{ rec: 1 }, { rec: 2 }], target: [{ rec: 1, method: 'a' }], jobs: [], settings, nowMs: NOW });
    expect(plan.actions.map((a) => (a.type === 'add' ? a.key : null))).toEqual([{ rec: 2 }]);
  });

  test('an ignored key (its job ignored) is neither added nor re-pended', () => {
    const plan = planRefresh({ source: [{ id: 1 }], jobs: [job('i', { id: 1 }, 'ignore', 10)], settings: { ...settings, keepCompleted: true }, nowMs: NOW });
    expect(plan.actions).toEqual([]);
  });

  test('keep_completed re-pends a success whose target row is gone, by removing it and adding the key', () => {
    const plan = planRefresh({ source: [{ id: 1 }], jobs: [job('s', { id: 1 }, 'success', 10)], settings: { ...settings, keepCompleted: true }, nowMs: NOW });
    expect(plan.actions).toEqual([{ type: 're_pend', key: { id: 1 }, identity: '{"id":1}', removeJobIds: ['s'] }]);
    expect(plan.counts.re_pended).toBe(1);
  });

  test("docket's job states map onto seed 000's statuses", () => {
    expect(['waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped', 'ignored'].map((s) => jobSetStatusOf(s as Parameters<typeof jobSetStatusOf>[0]))).toEqual([
      'pending',
      'pending',
      'reserved',
      'success',
      'error',
      'error',
      'ignore',
      'ignore',
    ]);
  });
});

describe('planJobOf: a stored job as the planner sees it', () => {
  const record = (value: Parameters<typeof jobSetStatusOf>[0], key: unknown, startedAt: string | null) => ({
    jobId: 'k1',
    state: { job: { value, context: { key, created_at: '2026-01-01T00:00:00.000Z' } }, run: { context: { started_at: startedAt } } },
  });

  test('keyed jobs map with their times; unkeyed ones are outside refresh', () => {
    expect(planJobOf(record('running', { id: 1 }, '2026-01-01T00:00:05.000Z'))).toEqual({
      jobId: 'k1',
      key: { id: 1 },
      status: 'reserved',
      createdAtMs: Date.parse('2026-01-01T00:00:00.000Z'),
      reservedAtMs: Date.parse('2026-01-01T00:00:05.000Z'),
    });
    expect(planJobOf(record('failed', { id: 1 }, '2026-01-01T00:00:05.000Z'))?.reservedAtMs).toBeNull();
    expect(planJobOf(record('queued', null, null))).toBeUndefined();
    // Checked by the type check (npm run typecheck): a stored job can be passed as it is.
    expectTypeOf<JobRecord>().toExtend<PlannableRecord>();
    expectTypeOf<{ jobId: string }>().not.toExtend<PlannableRecord>();
  });
});
