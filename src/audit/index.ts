/** The pure audit and replays: recorded messages in, violations, timelines and queue views out. */
export * from './types.js';
export * from './decode.js';
export * from './audit.js';
export * from './replay.js';
export * from './explain.js';
export * from './export.js';
export * from './waits.js';
