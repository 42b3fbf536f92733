/**
 * Events of templates and schedules for tests: builders, and fast-check arbitraries of plausible
 * histories. Revisions are mostly the next one (sometimes not), ticks come from a small pool of
 * times (so fires and misses often meet an already handled tick), triggers and reasons vary.
 */
import fc from 'fast-check';
import type { Envelope } from '../../machines/envelope.js';
import { FireTriggers, MissReasons, type ScheduleEvent, type SchedulePutData } from '../../machines/schedule.events.js';
import type { TemplateEvent, TemplatePutData } from '../../machines/template.events.js';

export const SCHEDULE = 'nightly';
export const TEMPLATE = 'report';
export const BASE_MS = Date.parse('2030-01-01T00:00:00.000Z');

/** An ISO time `seconds` after BASE_MS. */
export function sec(seconds: number): string {
  return new Date(BASE_MS + seconds * 1_000).toISOString();
}

let counter = 0;

export function scheduleEvent<T extends ScheduleEvent['type']>(type: T, data: Extract<ScheduleEvent, { type: T }>['data'], time = sec(0)): Extract<ScheduleEvent, { type: T }> {
  counter += 1;
  return { id: `se-${counter}`, type, time, aggregate: { kind: 'schedule', id: SCHEDULE }, data, meta: { node: 'n1' } } as Envelope as Extract<ScheduleEvent, { type: T }>;
}

export function templateEvent<T extends TemplateEvent['type']>(type: T, data: Extract<TemplateEvent, { type: T }>['data'], time = sec(0)): Extract<TemplateEvent, { type: T }> {
  counter += 1;
  return { id: `te-${counter}`, type, time, aggregate: { kind: 'template', id: TEMPLATE }, data, meta: { node: 'n1' } } as Envelope as Extract<TemplateEvent, { type: T }>;
}

export function schedulePut(revision: number, overrides: Partial<SchedulePutData> = {}): SchedulePutData {
  return {
    name: SCHEDULE,
    revision,
    template: TEMPLATE,
    job: null,
    cron: '*/10 * * * * *',
    timezone: 'UTC',
    start_at: null,
    end_at: null,
    jitter_ms: 0,
    catchup: 'none',
    catchup_window_ms: null,
    overlap: 'allow_all',
    params: null,
    note: null,
    paused: false,
    ...overrides,
  };
}

export function templatePut(revision: number, overrides: Partial<TemplatePutData> = {}): TemplatePutData {
  return { name: TEMPLATE, revision, queue: 'reports', params: { format: 'pdf' }, ...overrides };
}

const tickArb = fc.integer({ min: 0, max: 12 }).map((n) => sec(n * 10));
const timeArb = fc.integer({ min: 0, max: 120 }).map(sec);

/** One event; a put's `revision` is a bump (0, 1 or 2) that the history below turns into a number. */
const scheduleEventArb: fc.Arbitrary<ScheduleEvent> =
  fc.oneof(
    {
      weight: 1,
      arbitrary: fc
        .record({ bump: fc.constantFrom(1, 1, 1, 0, 2), paused: fc.boolean(), name: fc.constantFrom(SCHEDULE, SCHEDULE, 'other'), time: timeArb })
        .map(({ bump, paused, name, time }) => scheduleEvent('schedule.put', schedulePut(bump, { paused, name }), time)),
    },
    { weight: 1, arbitrary: timeArb.map((t) => scheduleEvent('schedule.enabled', {}, t)) },
    { weight: 1, arbitrary: fc.record({ note: fc.option(fc.constantFrom('maintenance', 'x')), t: timeArb }).map(({ note, t }) => scheduleEvent('schedule.disabled', { note }, t)) },
    { weight: 1, arbitrary: timeArb.map((t) => scheduleEvent('schedule.deleted', {}, t)) },
    {
      weight: 5,
      arbitrary: fc
        .record({ tick: tickArb, job: fc.constantFrom('j1', 'j2'), trigger: fc.option(fc.constantFrom(...FireTriggers), { nil: undefined }), t: timeArb })
        .map(({ tick, job, trigger, t }) => scheduleEvent('schedule.fired', trigger === undefined ? { tick, job_id: job } : { tick, job_id: job, trigger }, t)),
    },
    {
      weight: 3,
      arbitrary: fc.record({ tick: tickArb, reason: fc.constantFrom(...MissReasons), t: timeArb }).map(({ tick, reason, t }) => scheduleEvent('schedule.missed', { tick, reason }, t)),
    },
    {
      weight: 2,
      arbitrary: fc
        .record({ from: tickArb, to: tickArb, count: fc.integer({ min: 0, max: 5 }), reason: fc.constantFrom(...MissReasons), t: timeArb })
        .map(({ from, to, count, reason, t }) => scheduleEvent('schedule.missed', { from, to, count, reason }, t)),
    },
  );

/** Puts numbered from their bumps: mostly the next revision, sometimes a repeat or a gap. */
function numberRevisions<E extends ScheduleEvent | TemplateEvent>(events: E[]): E[] {
  let revision = 0;
  return events.map((e) => {
    if (e.type !== 'schedule.put' && e.type !== 'template.put') return e;
    const bump = e.data.revision;
    if (bump === 1) revision += 1;
    return { ...e, data: { ...e.data, revision: bump === 1 ? revision : revision + bump } };
  });
}

/** A schedule's history (the machine decides which events are accepted). */
export const scheduleHistoryArb: fc.Arbitrary<ScheduleEvent[]> = fc
  .tuple(
    // Most histories start with an enabling put early on, so later fires and misses can be accepted.
    fc.option(fc.integer({ min: 0, max: 10 }).map((t) => scheduleEvent('schedule.put', schedulePut(1), sec(t))), { freq: 5, nil: undefined }),
    fc.array(scheduleEventArb, { maxLength: 40 }),
  )
  .map(([first, rest]) => numberRevisions(first === undefined ? rest : [first, ...rest]));

export const templateHistoryArb: fc.Arbitrary<TemplateEvent[]> = fc.array(
  fc.oneof(
    {
      weight: 3,
      arbitrary: fc
        .record({ bump: fc.constantFrom(1, 1, 1, 0, 2), name: fc.constantFrom(TEMPLATE, TEMPLATE, 'other'), t: timeArb, priority: fc.option(fc.integer({ min: 0, max: 255 }), { nil: undefined }) })
        .map(({ bump, name, t, priority }) => templateEvent('template.put', templatePut(bump, priority === undefined ? { name } : { name, priority }), t)),
    },
    { weight: 1, arbitrary: timeArb.map((t) => templateEvent('template.archived', {}, t)) },
  ),
  { maxLength: 30 },
).map(numberRevisions);
