/**
 * Shape checks of template and schedule events read from the log, before they reach the
 * machines (XState ignores an unknown event type silently, and the guards and the planner read
 * times, crons and zones): the counterpart of src/audit/decode.ts `jobDataProblem` for the `sys`
 * partition's kinds. Each returns what is wrong, or null when the data is what the machines read.
 */
import { CatchupPolicies, FireTriggers, MissReasons, OverlapPolicies } from '../../machines/index.js';
import { canonicalTimeZone, cronProblem } from '../../machines/schedule-timing.js';

const isString = (v: unknown): v is string => typeof v === 'string';
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const isInt = (v: unknown): v is number => Number.isInteger(v);
const isTime = (v: unknown): boolean => typeof v === 'string' && Number.isFinite(Date.parse(v));
const isTimeOrNull = (v: unknown): boolean => v === null || isTime(v);
const oneOf = (values: readonly string[], v: unknown): boolean => isString(v) && values.includes(v);

/** What is wrong with a template event's data, or null. */
export function templateDataProblem(type: string, d: Record<string, unknown>): string | null {
  switch (type) {
    case 'template.put':
      if (!isString(d['name'])) return 'data.name is not a string';
      if (!isInt(d['revision']) || d['revision'] < 1) return 'data.revision is not a positive integer';
      if (!isString(d['queue'])) return 'data.queue is not a string';
      if (!isObject(d['params'])) return 'data.params is not an object';
      if (d['priority'] !== undefined && !isInt(d['priority'])) return 'data.priority is not an integer';
      if (d['max_attempts'] !== undefined && !isInt(d['max_attempts'])) return 'data.max_attempts is not an integer';
      if (d['lease_ms'] !== undefined && !isInt(d['lease_ms'])) return 'data.lease_ms is not an integer';
      if (d['backoff'] !== undefined && !isObject(d['backoff'])) return 'data.backoff is not an object';
      return null;
    case 'template.archived':
      return null;
    default:
      return `unknown template event type ${type}`;
  }
}

/** What is wrong with a schedule event's data, or null. */
export function scheduleDataProblem(type: string, d: Record<string, unknown>): string | null {
  switch (type) {
    case 'schedule.put': {
      if (!isString(d['name'])) return 'data.name is not a string';
      if (!isInt(d['revision']) || d['revision'] < 1) return 'data.revision is not a positive integer';
      if (typeof d['paused'] !== 'boolean') return 'data.paused is not a boolean';
      if (!isString(d['cron']) || cronProblem(d['cron']) !== null) return 'data.cron is not a usable cron';
      if (!isString(d['timezone']) || canonicalTimeZone(d['timezone']) === null) return 'data.timezone is not a known time zone';
      if (!isTimeOrNull(d['start_at']) || !isTimeOrNull(d['end_at'])) return 'data.start_at or data.end_at is not a time or null';
      if (!isInt(d['jitter_ms']) || d['jitter_ms'] < 0) return 'data.jitter_ms is not a non-negative integer';
      if (!oneOf(CatchupPolicies, d['catchup'])) return 'data.catchup is not a catch-up policy';
      if (!(d['catchup_window_ms'] === null || (isInt(d['catchup_window_ms']) && d['catchup_window_ms'] >= 0))) return 'data.catchup_window_ms is not a non-negative integer or null';
      if (!oneOf(OverlapPolicies, d['overlap'])) return 'data.overlap is not an overlap policy';
      if (!(d['template'] === null || isString(d['template']))) return 'data.template is not a string or null';
      if (!(d['job'] === null || (isObject(d['job']) && isString(d['job']['queue'])))) return 'data.job is not {queue, ...} or null';
      if (d['template'] === null && d['job'] === null) return 'data names neither a template nor a job';
      if (!(d['params'] === null || isObject(d['params']))) return 'data.params is not an object or null';
      return null;
    }
    case 'schedule.enabled':
    case 'schedule.deleted':
      return null;
    case 'schedule.disabled':
      return d['note'] === null || isString(d['note']) ? null : 'data.note is not a string or null';
    case 'schedule.fired':
      if (!isTime(d['tick'])) return 'data.tick is not a time';
      if (!isString(d['job_id'])) return 'data.job_id is not a string';
      if (d['trigger'] !== undefined && !oneOf(FireTriggers, d['trigger'])) return 'data.trigger is not cron, manual or backfill';
      return null;
    case 'schedule.missed':
      if (!oneOf(MissReasons, d['reason'])) return 'data.reason is not a miss reason';
      if ('tick' in d) return isTime(d['tick']) ? null : 'data.tick is not a time';
      if (!isTime(d['from']) || !isTime(d['to'])) return 'data.from or data.to is not a time';
      return isInt(d['count']) && d['count'] >= 1 ? null : 'data.count is not a positive integer';
    default:
      return `unknown schedule event type ${type}`;
  }
}
