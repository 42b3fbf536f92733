/**
 * `docket tail`: follow the log, one line per event, unpacked from the stored commits by
 * `Client.events()` (`--json`: one JSON object per line, `{seq, index, position, subject,
 * event}`, where `seq:index` is the event's place: its commit's stream sequence and its index in
 * the commit). Runs until Ctrl-C, or until `--limit` events were printed.
 */
import type { Command } from 'commander';
import { JOB_EVENT_TYPES } from '../../machines/index.js';
import { InvalidRequestError } from '../errors.js';
import { isQueueName, parseEventSubject } from '../nats/subjects.js';
import { withCommonOptions, type CommonFlags } from './common.js';
import { parseFrom, parsePositiveInteger } from './options.js';
import { cellText, writeJson, writeOut } from './render.js';
import { setExitCode, withClient } from './session.js';

interface TailFlags extends CommonFlags {
  readonly queue?: string;
  readonly type?: string[];
  readonly from?: string;
  readonly limit?: string;
}

/** The few data fields worth a glance on one line, by event type. */
const GLANCE: Record<string, readonly string[]> = {
  'job.submitted': ['priority', 'key', 'run_at'],
  'job.claimed': ['worker', 'run_id'],
  'job.succeeded': ['run_id'],
  'job.failed': ['run_id', 'reason'],
  'job.cancelled': ['reason'],
  'job.moved': ['priority', 'position'],
};

/** One line for people: `seq:index`, time, type, queue, aggregate id and a glance at the data. */
export function formatEventLine(seq: number, index: number, subject: string, event: { type: string; time: string; queue?: string; data: unknown }): string {
  const parsed = parseEventSubject(subject);
  const data = (event.data ?? {}) as Record<string, unknown>;
  const id = parsed?.id ?? (typeof data['job_id'] === 'string' ? data['job_id'] : subject);
  const glance = (GLANCE[event.type] ?? [])
    .filter((field) => data[field] !== undefined && data[field] !== null)
    .map((field) => `${field}=${cellText(data[field])}`)
    .join(' ');
  return [`${seq}:${index}`.padStart(10), event.time, event.type.padEnd(18), event.queue ?? parsed?.queue ?? '-', id, glance].join('  ').trimEnd();
}

async function tailAction(flags: TailFlags): Promise<void> {
  if (flags.queue !== undefined && !isQueueName(flags.queue)) throw new InvalidRequestError('--queue must match [A-Za-z0-9_-]{1,64}');
  const fromFlag = (flags.from ?? 'now').trim();
  const at = /^(\d+):(\d+)$/.exec(fromFlag);
  const from = at ? { seq: Math.max(1, Number(at[1])), index: Number(at[2]) } : parseFrom(fromFlag);
  const limit = flags.limit === undefined ? undefined : parsePositiveInteger(flags.limit, '--limit');
  const types = flags.type?.flatMap((t) => t.split(',')).map((t) => t.trim()).filter((t) => t !== '');
  // A misspelt type would match nothing and the tail would wait forever, silent.
  const unknown = types?.filter((t) => !(JOB_EVENT_TYPES as readonly string[]).includes(t)) ?? [];
  if (unknown.length > 0) {
    throw new InvalidRequestError(`--type: unknown event type ${unknown.map((t) => JSON.stringify(t.slice(0, 64))).join(', ')}; known types: ${JOB_EVENT_TYPES.join(', ')}`);
  }
  const abort = new AbortController();
  const stop = () => abort.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  // `docket tail | head` closes stdout early: that is the end, not an error.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') stop();
  });
  try {
    await withClient(flags, async (client) => {
      let printed = 0;
      if (limit !== undefined && printed >= limit) return;
      const events = client.events({
        from,
        signal: abort.signal,
        ...(flags.queue === undefined ? {} : { queue: flags.queue }),
        ...(types === undefined || types.length === 0 ? {} : { types }),
      });
      for await (const { seq, index, position, subject, event } of events) {
        if (abort.signal.aborted) break;
        if (flags.json) writeJson({ seq, index, position, subject, event });
        else writeOut(formatEventLine(seq, index, subject, event));
        printed += 1;
        if (limit !== undefined && printed >= limit) break;
      }
    });
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
  setExitCode(0);
}

export function registerTail(program: Command): void {
  withCommonOptions(
    program
      .command('tail')
      .description('follow the log, one line per event (unpacked from its commits)')
      .option('--queue <queue>', "only this queue's events")
      .option('--type <type...>', 'only these event types (e.g. job.submitted job.failed)')
      .option('--from <where>', "'now', 'all', a commit sequence, a position seq:index, or an ISO-8601 time", 'now')
      .option('--limit <n>', 'stop after this many events'),
  ).action(async (flags: TailFlags) => tailAction(flags));
}
