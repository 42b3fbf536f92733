/**
 * `docket replay --schedule <name>`: a schedule's history from the `sys` partition: every event
 * of the schedule in log order, each folded through the Schedule machine (the fold derived from
 * it), with what it fired or missed and the state after. Pure over stored messages.
 */
import { evolveSchedule, INITIAL_SCHEDULE_STATE, type ScheduleEvent, type ScheduleState } from '../../machines/index.js';
import { decodeStoredCommit } from './decode.js';
import type { RecordedMessage } from './types.js';

export interface ScheduleReplayEntry {
  readonly seq: number;
  readonly index: number;
  readonly time: string;
  readonly type: string;
  readonly data: Record<string, unknown>;
  /** false: the machine refused it (a tampered log); the state stays as it was. */
  readonly accepted: boolean;
  readonly status: string;
  readonly revision: number;
  readonly handled_until: string | null;
}

export interface ScheduleReplay {
  readonly schedule: string;
  readonly entries: ScheduleReplayEntry[];
  readonly fired: number;
  readonly missed: number;
}

export class ScheduleReplayer {
  private state: ScheduleState = INITIAL_SCHEDULE_STATE;
  private readonly entries: ScheduleReplayEntry[] = [];

  constructor(private readonly name: string) {}

  push(message: RecordedMessage): void {
    const decoded = decodeStoredCommit(message);
    if (!decoded.ok) return;
    decoded.events.forEach((d, index) => {
      if (d.kind !== 'other' || d.aggregateKind !== 'schedule' || d.aggregateId !== this.name) return;
      const event = d.event as ScheduleEvent;
      const after = evolveSchedule(this.state, event);
      if (after !== null) this.state = after;
      this.entries.push({
        seq: message.seq,
        index,
        time: event.time,
        type: event.type,
        data: event.data as unknown as Record<string, unknown>,
        accepted: after !== null,
        status: this.state.value,
        revision: this.state.context.revision,
        handled_until: this.state.context.handled_until,
      });
    });
  }

  result(): ScheduleReplay {
    return { schedule: this.name, entries: this.entries, fired: this.state.context.fired_count, missed: this.state.context.missed_count };
  }
}
