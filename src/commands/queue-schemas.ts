/**
 * Validators of the queue aggregate's commands (pause, resume, queue.set, queue.show) and the
 * reservation's (reserve, release, renew, reservations). The JSON Schemas in schemas/ are
 * generated from these (src/commands/json-schemas.ts).
 */
import { z } from 'zod';
import { Limits } from './limits.js';
import { commandId, idToken, jobSpecSchema, queueName } from './schemas.js';

const note = z.string().max(Limits.MaxNoteChars);
/** Who asks (a person or a system), written into the events' meta.actor; the node is always there. */
const actor = note.describe('who asks: kept in the events as meta.actor').optional();
/** A queue with no job and no settings yet is refused unless the command says to create it (typos mint nothing). */
const create = z.boolean().describe('configure a queue that has no job yet').optional();

export const pauseSchema = z.object({ id: commandId.optional(), queue: queueName, reason: note.optional(), actor, create }).strict();
export const resumeSchema = z.object({ id: commandId.optional(), queue: queueName, actor }).strict();

const limit = z.number().int().min(1).max(Limits.MaxConcurrency);
export const rateSchema = z
  .object({
    limit: z.number().int().min(1).max(Limits.MaxRateLimit),
    period_ms: z.number().int().min(Limits.MinRatePeriodMs).max(Limits.MaxRatePeriodMs),
  })
  .strict();

export const queueSetSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    concurrency: limit.nullable().describe('at most this many running at once; null clears').optional(),
    rate: rateSchema.nullable().describe('at most limit claims in any period_ms (sliding window); null clears').optional(),
    key_concurrency: limit.nullable().describe('per concurrency_key: at most this many running at once; null clears').optional(),
    key_rate: rateSchema.nullable().describe('per concurrency_key: at most limit claims in any period_ms; null clears').optional(),
    actor,
    create,
  })
  .strict()
  .refine((c) => c.concurrency !== undefined || c.rate !== undefined || c.key_concurrency !== undefined || c.key_rate !== undefined, {
    message: 'give at least one of concurrency, rate, key_concurrency, key_rate',
    path: ['concurrency'],
  });
export const queueShowSchema = z.object({ queue: queueName }).strict();

const ttlMs = z.number().int().min(Limits.MinReservationTtlMs).max(Limits.MaxReservationTtlMs);
export const reserveSchema = z
  .object({
    id: commandId.optional(),
    queue: queueName,
    holder: z.string().min(1).max(200),
    ttl_ms: ttlMs,
    /** A job to create and claim under the reservation, in the same commit (direct execution). */
    job: jobSpecSchema.describe('a submit body (no key, no fan_out); its queue must be the reserved queue').optional(),
    /** The direct job's lease; heartbeats extend it as any run's. */
    lease_ms: z.number().int().min(Limits.MinLeaseMs).max(Limits.MaxLeaseMs).optional(),
    create,
  })
  .strict()
  .refine((r) => r.job === undefined || r.job.queue === r.queue, { message: "the job's queue must be the reserved queue", path: ['job', 'queue'] });
export const releaseSchema = z.object({ id: commandId.optional(), reservation_id: idToken }).strict();
export const renewSchema = z.object({ id: commandId.optional(), reservation_id: idToken, ttl_ms: ttlMs }).strict();
export const reservationsSchema = z.object({ queue: queueName.optional() }).strict();

export type PauseCommand = z.infer<typeof pauseSchema>;
export type ResumeCommand = z.infer<typeof resumeSchema>;
export type QueueSetCommand = z.infer<typeof queueSetSchema>;
export type QueueShowCommand = z.infer<typeof queueShowSchema>;
export type ReserveCommand = z.infer<typeof reserveSchema>;
export type ReleaseCommand = z.infer<typeof releaseSchema>;
export type RenewCommand = z.infer<typeof renewSchema>;
export type ReservationsCommand = z.infer<typeof reservationsSchema>;
