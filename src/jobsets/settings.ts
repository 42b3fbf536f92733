/**
 * Seed 000's precedence, written once: a command's explicit value > the job set's setting >
 * docket's default (src/commands/limits.ts JobSetDefaults). "Explicit" means present: a field
 * left out of the command (or the job set) falls through; a value that is given wins even when
 * it is falsy (priority 0, stale_timeout_s 0 = skip stale cleanup, refresh false). Pure.
 */
import type { JobSetSettings, RefreshCommand } from '../commands/jobset-schemas.js';
import { JobSetDefaults } from '../commands/limits.js';

/** The first value that is not undefined: command, then job set, then default. */
export function firstGiven<T>(command: T | undefined, jobSet: T | undefined, fallback: T): T {
  if (command !== undefined) return command;
  if (jobSet !== undefined) return jobSet;
  return fallback;
}

/** What a refresh runs with, every value decided (the planner's settings, src/jobsets/plan.ts). */
export interface ResolvedRefreshSettings {
  readonly keepCompleted: boolean;
  /** 0: no stale cleanup. */
  readonly staleTimeoutS: number;
  /** null: no orphan cleanup (seed 000: it must be asked for). */
  readonly orphanTimeoutS: number | null;
  readonly priority: number;
  readonly delayMs: number;
}

/** The job set's settings as the precedence reads them; a queue that is not (yet) a job set has none. */
export type JobSetSettingsView = Pick<JobSetSettings, 'keep_completed' | 'stale_timeout_s' | 'default_priority' | 'auto_refresh'>;

export function resolveRefreshSettings(command: Omit<RefreshCommand, 'queue'>, jobSet: Partial<JobSetSettingsView> = {}): ResolvedRefreshSettings {
  return {
    // keep_completed is the job set's alone: a refresh cannot change how its jobs end.
    keepCompleted: firstGiven<boolean>(undefined, jobSet.keep_completed, JobSetDefaults.keepCompleted),
    staleTimeoutS: firstGiven(command.stale_timeout_s, jobSet.stale_timeout_s, JobSetDefaults.staleTimeoutS),
    // Seed 000: orphan cleanup is never a stored setting, only a refresh's explicit choice.
    orphanTimeoutS: firstGiven<number | null>(command.orphan_timeout_s, undefined, JobSetDefaults.orphanTimeoutS),
    priority: firstGiven(command.priority, jobSet.default_priority, JobSetDefaults.defaultPriority),
    delayMs: firstGiven(command.delay_ms, undefined, JobSetDefaults.delayMs),
  };
}

/** populate's options that follow the same precedence (`--refresh/--no-refresh`, `--priority`). */
export interface PopulateChoices {
  readonly refresh?: boolean | undefined;
  readonly priority?: number | undefined;
}
export interface ResolvedPopulateSettings {
  readonly refresh: boolean;
  /** Only jobs at this priority or more urgent are taken; null: any priority. */
  readonly maxPriority: number | null;
}

export function resolvePopulateSettings(choices: PopulateChoices, jobSet: Partial<JobSetSettingsView> = {}): ResolvedPopulateSettings {
  return {
    refresh: firstGiven(choices.refresh, jobSet.auto_refresh, JobSetDefaults.autoRefresh),
    // Seed 000: populate's priority is a filter; without it every priority is taken.
    maxPriority: choices.priority ?? null,
  };
}
