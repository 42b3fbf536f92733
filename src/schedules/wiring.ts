/**
 * Wires templates and schedules into a node: the sys commands (run on the `sys` leader through
 * the router), the reads (any node), the queue-leader operation that creates a fired job under
 * its derived id, and the ticker (a SysReactor). node.ts calls `registerScheduleCommands` once.
 */
import { Priority, type JobSubmittedData } from '../../machines/index.js';
import { toIso } from '../clock.js';
import type { Clock } from '../clock.js';
import { appendNewJobs, createJob, envelope, type CommandContext } from '../commands/handle-command.js';
import { DocketError } from '../errors.js';
import { JobDefaults } from '../commands/limits.js';
import {
  scheduleCommandSchemas,
  scheduleGetSchema,
  scheduleListSchema,
  templateArchiveSchema,
  templateGetSchema,
  templateListSchema,
  type ScheduleBackfillCommand,
  type ScheduleByNameCommand,
  type ScheduleDisableCommand,
  type SchedulePutCommand,
  type TemplateArchiveCommand,
  type TemplatePutCommand,
} from '../commands/schedule-schemas.js';
import { validate } from '../commands/validate.js';
import type { Logger } from '../logger.js';
import { SYS_LEASE } from '../nats/subjects.js';
import { ScheduleTicker } from '../reactors/schedule-ticker.js';
import { plainSubmitId } from '../store/job-store.js';
import type { Mutable } from '../mutable.js';
import type { ScheduledJob } from './fire.js';
import {
  archiveTemplate,
  backfillSchedule,
  deleteSchedule,
  disableSchedule,
  enableSchedule,
  getSchedule,
  getTemplate,
  listSchedules,
  listTemplates,
  putSchedule,
  putTemplate,
  triggerSchedule,
} from './sys-commands.js';

type Reply = Record<string, unknown>;

export interface ScheduleWiring {
  readonly context: CommandContext;
  readonly clock: Clock;
  readonly log: Logger;
  readonly isSysLeader: () => boolean;
  /** router.register: an operation run on a partition's leader. */
  readonly registerOnLeader: (op: string, operation: (queue: string, body: unknown) => Promise<Reply>) => void;
  /** router.run: runs an operation on the leader of a queue (or of SYS_LEASE). */
  readonly runOnLeader: (queue: string, op: string, body: unknown) => Promise<Reply>;
  /** commands.register: docket.cmd.<verb>. */
  readonly registerCommand: (verb: string, handler: (body: unknown) => Reply | Promise<Reply>) => void;
}

/** The job.submitted of a fired job: its derived id, its provenance; a resend finds the job by id. */
function firedJobEvent(ctx: CommandContext, job: ScheduledJob) {
  const now = ctx.clock.now();
  const time = toIso(now);
  // A tick fired ahead is claimable at its due time; any other fire at once.
  // due_at is toTick's text: kept as it is when it is the later.
  const runAt = job.due_at !== undefined && Date.parse(job.due_at) > now ? job.due_at : time;
  // Built field by field, not by spreads: one per fire (see jobOfFire).
  const data: Mutable<JobSubmittedData> = {
    job_id: job.job_id,
    key: null,
    params: job.params,
    priority: job.priority ?? Priority.Default,
    position: null,
    run_at: runAt,
    max_attempts: job.max_attempts ?? JobDefaults.maxAttempts,
    backoff: job.backoff ?? JobDefaults.backoff,
    attempt: 1,
    retry_of: null,
    waiting: false,
  };
  if (job.template !== null) data.template = job.template;
  data.schedule = { name: job.schedule, tick: job.tick, trigger: job.trigger };
  return envelope(ctx, 'job.submitted', { queue: job.queue, jobId: job.job_id }, plainSubmitId(job.job_id), data, undefined, time);
}

/** One fired job's answer in a batch: created (or found: its id is derived), or the error its commit failed with. */
export type FiredJobReply = { readonly ok: true } | { readonly ok: false; readonly error: string };

/**
 * On a queue's leader: the jobs of many fires (a ticker pass), as few commits as they fit. A job
 * whose id no job holds and no event waits on is new: those are decided together and handed to
 * the writer at once (the checks and the queueing run without an await between them). Any other
 * (a resend after a leader change) goes through createJob, which finds the job made first.
 */
async function createFiredJobs(ctx: CommandContext, queue: string, jobs: readonly ScheduledJob[]): Promise<FiredJobReply[]> {
  const writer = await ctx.writer(queue);
  const fresh: number[] = [];
  const known: number[] = [];
  const events = jobs.map((job) => firedJobEvent(ctx, job));
  events.forEach((event, i) => {
    const id = event.data.job_id;
    const unseen = !writer.isBusy(id) && ctx.store.get(id) === undefined && ctx.store.evicted(id) === undefined && ctx.store.bySubmitEventId(event.id) === undefined && ctx.store.evictedBySubmitEventId(event.id) === undefined;
    (unseen ? fresh : known).push(i);
  });
  const replies = new Array<FiredJobReply>(jobs.length);
  const failed = (err: unknown): FiredJobReply => ({ ok: false, error: err instanceof Error ? err.message : String(err) });
  await Promise.all([
    fresh.length === 0
      ? undefined
      : appendNewJobs(ctx, queue, writer, fresh.map((i) => events[i]!)).then(
          (created) => fresh.forEach((i, k) => (replies[i] = created[k] instanceof Error ? failed(created[k]) : { ok: true })),
          (err: unknown) => fresh.forEach((i) => (replies[i] = failed(err))),
        ),
    ...known.map(async (i) => {
      try {
        await createJob(ctx, events[i]!);
        replies[i] = { ok: true };
      } catch (err) {
        // A job of this id made by another command (not this fire's) is the fire's answer too: nothing to retry.
        replies[i] = err instanceof DocketError && err.code !== 'unavailable' ? { ok: true } : failed(err);
      }
    }),
  ]);
  return replies;
}

export function registerScheduleCommands(w: ScheduleWiring): ScheduleTicker {
  const ctx = w.context;
  const ticker = new ScheduleTicker({
    ctx,
    clock: w.clock,
    log: w.log,
    isLeader: w.isSysLeader,
    submit: async (job) => {
      await w.runOnLeader(job.queue, 'schedule.submit', job);
    },
    submitBatch: async (queue, jobs) => {
      const reply = await w.runOnLeader(queue, 'schedule.submit_batch', { jobs });
      return reply['jobs'] as FiredJobReply[];
    },
    cancel: async (jobId) => {
      const queue = ctx.store.queueOf(jobId);
      if (queue !== undefined) await w.runOnLeader(queue, 'cancel', { job_id: jobId, reason: 'cancel_other: the next fire of its schedule' });
    },
  });
  ctx.aggregates.onChange(ticker.applyAggregate);
  ctx.store.onChange(ticker.applyJob);

  // On a queue's leader: the fired job, under its derived id (a resend returns the job made first).
  w.registerOnLeader('schedule.submit', async (_queue, body) => {
    const { record, created } = await createJob(ctx, firedJobEvent(ctx, body as ScheduledJob));
    return { job_id: record.jobId, status: record.state.job.value, created };
  });

  w.registerOnLeader('schedule.submit_batch', async (queue, body) => ({ jobs: await createFiredJobs(ctx, queue, (body as { jobs: ScheduledJob[] }).jobs) }));

  // On the sys leader.
  const sys: Record<string, (body: unknown) => Promise<object>> = {
    'template.put': (b) => putTemplate(ctx, b as TemplatePutCommand),
    'template.archive': (b) => archiveTemplate(ctx, b as TemplateArchiveCommand),
    'schedule.put': (b) => putSchedule(ctx, ticker, b as SchedulePutCommand),
    'schedule.enable': (b) => enableSchedule(ctx, ticker, b as ScheduleByNameCommand),
    'schedule.disable': (b) => disableSchedule(ctx, ticker, b as ScheduleDisableCommand),
    'schedule.delete': (b) => deleteSchedule(ctx, ticker, b as ScheduleByNameCommand),
    'schedule.trigger': (b) => triggerSchedule(ctx, ticker, b as ScheduleByNameCommand),
    'schedule.backfill': (b) => backfillSchedule(ctx, ticker, b as ScheduleBackfillCommand),
  };
  for (const [op, run] of Object.entries(sys)) w.registerOnLeader(op, async (_lease, body) => ({ ...(await run(body)) }));
  // Validated here, on the node the request reached: bad input never reaches (or makes) a leader.
  for (const verb of Object.keys(sys)) {
    const schema = scheduleCommandSchemas[verb as keyof typeof scheduleCommandSchemas];
    w.registerCommand(verb, (body) => w.runOnLeader(SYS_LEASE, verb, validate(schema as typeof templateArchiveSchema, body)));
  }

  w.registerCommand('template.get', async (body) => ({ ...(await getTemplate(ctx, validate(templateGetSchema, body).name)) }));
  w.registerCommand('template.list', (body) => {
    validate(templateListSchema, body);
    return { templates: listTemplates(ctx) };
  });
  w.registerCommand('schedule.get', async (body) => ({ ...(await getSchedule(ctx, validate(scheduleGetSchema, body).name)) }));
  w.registerCommand('schedule.list', (body) => ({ schedules: listSchedules(ctx, validate(scheduleListSchema, body)) }));
  return ticker;
}
