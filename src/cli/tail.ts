/**
 * `docket tail`: follow the event stream, one line per event (`--json`: one JSON object per line,
 * `{seq, subject, event}`). Runs until Ctrl-C, or until `--limit` events were printed.
 */
import type { Command } from 'commander';
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

export function formatEventLine(seq: number, subject: string, event: { type: string; time: string; queue?: string; data: unknown }): string {
  const parsed = parseEventSubject(subject);
  const data = (event.data ?? {}) as Record<string, unknown>;
  const id = parsed?.id ?? (typeof data['job_id'] === 'string' ? data['job_id'] : subject);
  const glance = (GLANCE[event.type] ?? [])
    .filter((field) => data[field] !== undefined && data[field] !== null)
    .map((field) => `${field}=${cellText(data[field])}`)
    .join(' ');
  return [String(seq).padStart(8), event.time, event.type.padEnd(18), event.queue ?? parsed?.queue ?? '-', id, glance].join('  ').trimEnd();
}

async function tailAction(flags: TailFlags): Promise<void> {
  if (flags.queue !== undefined && !isQueueName(flags.queue)) throw new InvalidRequestError('--queue must match [A-Za-z0-9_-]{1,64}');
  const from = parseFrom(flags.from ?? 'now');
  const limit = flags.limit === undefined ? undefined : parsePositiveInteger(flags.limit, '--limit');
  const types = flags.type?.flatMap((t) => t.split(',')).map((t) => t.trim()).filter((t) => t !== '');
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
      for await (const { seq, subject, event } of events) {
        if (abort.signal.aborted) break;
        if (flags.json) writeJson({ seq, subject, event });
        else writeOut(formatEventLine(seq, subject, event));
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
      .description('follow the event stream, one line per event')
      .option('--queue <queue>', "only this queue's job events")
      .option('--type <type...>', 'only these event types (e.g. job.submitted job.failed)')
      .option('--from <where>', "'now', 'all', a stream sequence, or an ISO-8601 time", 'now')
      .option('--limit <n>', 'stop after this many events'),
  ).action(async (flags: TailFlags) => tailAction(flags));
}
