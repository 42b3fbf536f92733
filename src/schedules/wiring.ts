/**
 * Wires templates and schedules into a node: the sys commands (run on the `sys` leader through
 * the router), the reads (any node), the queue-leader operation that creates a fired job under
 * its derived id, and the ticker (a SysReactor). node.ts calls `registerScheduleCommands` once.
 */
import { Priority } from '../../machines/index.js';
import type { Clock } from '../clock.js';
import { createJob, envelope, type CommandContext } from '../commands/handle-command.js';
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
  return envelope(ctx, 'job.submitted', { queue: job.queue, jobId: job.job_id }, plainSubmitId(job.job_id), {
    job_id: job.job_id,
    key: null,
    params: job.params,
    priority: job.priority ?? Priority.Default,
    position: null,
    run_at: new Date(ctx.clock.now()).toISOString(),
    max_attempts: job.max_attempts ?? JobDefaults.maxAttempts,
    backoff: job.backoff ?? JobDefaults.backoff,
    attempt: 1,
    retry_of: null,
    waiting: false,
    ...(job.template === null ? {} : { template: job.template }),
    schedule: { name: job.schedule, tick: job.tick, trigger: job.trigger },
  });
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
