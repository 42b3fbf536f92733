/** The pure core: machines, their events, and the folds derived from them. */
export * from './envelope.js';
export * from './decider.js';
export * from './fold.js';
export * from './job.events.js';
export * from './job.machine.js';
export * from './job-run.machine.js';
export * from './job.aggregate.js';
export * from './template.events.js';
export * from './template.machine.js';
export * from './schedule.events.js';
export * from './schedule.machine.js';
export * from './schedule-timing.js';

/** Machine versions; a checkpoint written under other versions is dropped and rebuilt from the log. */
export const MACHINE_VERSIONS = { job: 1, jobRun: 1 } as const;
export * from './retry-policy.js';
