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

/**
 * Machine versions; a checkpoint written under other versions is dropped and rebuilt from the log.
 * job 2: the `removed` state (`job.removed`); the run machine accepts job.removed as a no-op. A
 * version-1 checkpoint could be kept (it holds no removed job), but an older node must never read
 * a checkpoint holding one, so both sides drop the other's once.
 * queue 2: job sets (`queue.jobset_put`, `queue.refreshed`; context `jobset`, `refreshes`).
 * jobnode 1: fan-out jobs' nodes (machines/jobnode.machine.ts).
 * template 1, schedule 1: their aggregates (partition sys) are folded and checkpointed since
 * issue 13's wiring.
 */
export const MACHINE_VERSIONS = { job: 2, jobRun: 3, queue: 2, reservation: 1, jobnode: 1, group: 1, template: 1, schedule: 1 } as const;
export * from './retry-policy.js';
export * from './queue.machine.js';
export * from './reservation.machine.js';
export * from './group.machine.js';
export * from './jobnode.machine.js';
export * from './aggregates.js';
