/** docket's public API: the SDK client and worker, an in-process node, errors and the machines' types. */
export { Client, EventStream, type ClientOptions, type EventsOptions, type RecordedEvent, type SubmitJob, type SubmitResult, type JobDetail } from './client/client.js';
export { Worker, type WorkerOptions, type WorkerJob, type WorkerJobContext, type WorkerHandler } from './client/worker.js';
export type { LocalWork } from './dispatch/work-service.js';
export type { LocalCommands } from './commands/command-service.js';
export type { LocalLive, LiveEvent, LiveEvents, LiveOptions } from './client/live.js';
export { startNode, type DocketNode, type DocketOptions } from './node.js';
export type { LiveEventMode } from './nats/subjects.js';
/** A stored or live commit's bytes (`docket.live.*`, or read from DOCKET) to its events, each submit whole. */
export { decodeCommit } from './nats/codec.js';
export {
  DocketError,
  InvalidRequestError,
  NotFoundError,
  InvalidTransitionError,
  ConflictError,
  StaleRunError,
  PausedError,
  UnavailableError,
  NonRetryableJobError,
  ErrorCodes,
  type ErrorCode,
  type ErrorBody,
} from './errors.js';
export { ManualClock, systemClock, type Clock } from './clock.js';
export { createLogger, type Logger } from './logger.js';
export type { JobSpec, RetryAllCommand, CancelAllCommand, CleanCommand } from './commands/schemas.js';
export type { BulkReply } from './commands/bulk-commands.js';
export type { DeleteReply, IgnoreReply, JobSetPutReply, JobSetShowReply, RefreshReply } from './commands/jobset-commands.js';
export type { DeleteCommand, IgnoreCommand, JobSetPutCommand, RefreshCommand, KeySourceSpec } from './commands/jobset-schemas.js';
export type { JobSetDefinition, RefreshedCounts } from '../machines/index.js';
export type { Commit, Envelope, JobEvent, JobEventType, JobStatus, RunStatus, Json, JsonObject } from '../machines/index.js';
export type { QueueView } from './commands/queue-commands.js';
export type { QueueShow, HoldView } from './commands/flow-queries.js';
export type { Reserved, ReservationView } from './commands/reservation-commands.js';
export type { QueueSettings, QueueSettingsChange, RateLimit, QueueEvent, ReservationEvent } from '../machines/index.js';
export type { ScheduleView, TemplateView } from './schedules/sys-commands.js';
export type { SchedulePutCommand, TemplatePutCommand } from './commands/schedule-schemas.js';
