/** How `docket replay --schedule` prints a schedule's history: a table for people, JSON for scripts. */
import type { ScheduleReplay } from '../audit/schedule-replay.js';
import { table, writeJson, writeOut } from './render.js';

/** What an event did, in a few words: the tick fired and its job, the ticks missed and why. */
function whatOf(type: string, d: Record<string, unknown>): string {
  switch (type) {
    case 'schedule.fired':
      return `${String(d['tick'])} -> ${String(d['job_id'])}${d['trigger'] === undefined ? '' : ` (${String(d['trigger'])})`}`;
    case 'schedule.missed':
      return 'tick' in d ? `${String(d['tick'])} missed: ${String(d['reason'])}` : `${String(d['count'])} ticks ${String(d['from'])} .. ${String(d['to'])} missed: ${String(d['reason'])}`;
    case 'schedule.put':
      return `revision ${String(d['revision'])}: ${String(d['cron'])} (${String(d['timezone'])})${d['paused'] === true ? ', paused' : ''}`;
    case 'schedule.disabled':
      return d['note'] === null ? '' : String(d['note']);
    default:
      return '';
  }
}

export function printScheduleReplay(replay: ScheduleReplay, json: boolean, limit: number): void {
  if (json) {
    writeJson({ ok: true, ...replay });
    return;
  }
  const shown = replay.entries.slice(-limit);
  writeOut(
    table(
      ['position', 'time', 'event', 'what', 'status after'],
      shown.map((e) => [`${e.seq}:${e.index}`, e.time, e.accepted ? e.type : `${e.type} (REFUSED)`, whatOf(e.type, e.data), e.status]),
    ),
  );
  const more = replay.entries.length - shown.length;
  writeOut(`schedule ${replay.schedule}: ${replay.fired} fired, ${replay.missed} ticks missed${more > 0 ? `; the ${more} earlier events are not shown (--limit, or --json for all)` : ''}`);
}
