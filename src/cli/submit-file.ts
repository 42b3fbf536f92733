/**
 * `docket submit <queue> --file jobs.jsonl`: one job per line, sent in batches of up to 10,000
 * jobs and three quarters of the server's max_payload (one request each), with a progress bar
 * when stderr is a terminal. A line is a job spec
 * (`{"params":{...},"key":...,"priority":...}`); the queue argument and the flags are defaults a
 * line may override. With `--id`, batch n carries the command id `<id>:<n>`, so running the same
 * file again with the same id completes what was missing and doubles nothing.
 */
import { createReadStream, statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Client } from '../client/client.js';
import { DocketError, InvalidRequestError, type ErrorBody } from '../errors.js';

/** One request's worth of jobs: the server's batch limit (Limits.MaxBatchJobs). */
export const FILE_CHUNK_JOBS = 10_000;
/** nats-server's default max_payload, for a connection that has not said its own. */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/**
 * The bytes of jobs one request may carry: three quarters of the server's max_payload. The rest
 * is margin for the request's own fields and for a node that forwards it wrapped in another
 * message; any job within the params and key limits (65 KiB) fits many times over.
 */
export function batchBytesFor(maxPayload: number | undefined): number {
  return Math.floor(((maxPayload ?? DEFAULT_MAX_PAYLOAD) * 3) / 4);
}

export interface FileSubmitSummary {
  readonly total: number;
  readonly created: number;
  readonly existing: number;
  readonly failed: number;
  /** Items the server refused one by one (the rest of their batch went in). */
  readonly failures: { line: number; error: ErrorBody }[];
}

interface Chunk {
  readonly jobs: Record<string, unknown>[];
  readonly lines: number[];
  readonly bytes: number;
}

interface Bar {
  update(value: number, payload: Record<string, unknown>): void;
  stop(): void;
}

async function progressBar(totalBytes: number | undefined): Promise<Bar | undefined> {
  if (!process.stderr.isTTY || totalBytes === undefined || totalBytes === 0) return undefined;
  const { default: cliProgress } = await import('cli-progress');
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: 'submitting |{bar}| {percentage}% | {jobs} jobs | {failed} failed | eta {eta_formatted}',
      hideCursor: true,
      etaBuffer: 50,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(totalBytes, 0, { jobs: 0, failed: 0 });
  return bar;
}

/** Rewrites `jobs.3.priority: ...` in a refused batch's message into `line 17 priority: ...`. */
function nameLines(message: string, lines: readonly number[]): string {
  return message.replace(/\bjobs\.(\d+)(?:\.([A-Za-z0-9_.]+))?/g, (whole, index: string, field: string | undefined) => {
    const line = lines[Number(index)];
    if (line === undefined) return whole;
    return field === undefined ? `line ${line}` : `line ${line} ${field}`;
  });
}

/**
 * A refused batch's issues (`details.issues`, paths `jobs.<i>.<field>`) grouped by the file line
 * of job i, in line order: one message per line, its issues joined. Empty when the issues do not
 * name jobs (the batch as a whole was refused).
 */
function issuesByLine(err: DocketError, lines: readonly number[]): { line: number; message: string }[] {
  const issues = err.details?.['issues'];
  if (!Array.isArray(issues)) return [];
  const byLine = new Map<number, string[]>();
  for (const issue of issues as unknown[]) {
    if (issue === null || typeof issue !== 'object') return [];
    const { path, message } = issue as { path?: unknown; message?: unknown };
    const match = typeof path === 'string' ? /^jobs\.(\d+)(?:\.(.+))?$/.exec(path) : null;
    const line = match ? lines[Number(match[1])] : undefined;
    if (line === undefined || typeof message !== 'string') return [];
    const text = `${match![2] === undefined ? '' : `${match![2]}: `}${message.replace(/\s*\n\s*/g, ' ')}`;
    byLine.set(line, [...(byLine.get(line) ?? []), text]);
  }
  return [...byLine.entries()].sort(([a], [b]) => a - b).map(([line, messages]) => ({ line, message: messages.join('; ') }));
}

/** A line that is not a job spec; the batch it would have joined is not sent. */
class LineError extends Error {
  constructor(
    message: string,
    readonly line: number,
    readonly firstUnsent: number,
  ) {
    super(message);
  }
}

async function* readChunks(path: string, defaults: Record<string, unknown>, maxBatchBytes: number): AsyncGenerator<Chunk> {
  const input = path === '-' ? process.stdin : createReadStream(path);
  const reader = createInterface({ input, crlfDelay: Infinity });
  let jobs: Record<string, unknown>[] = [];
  let lines: number[] = [];
  let bytes = 0;
  /** The encoded jobs of this chunk, each with its comma in the request's array. */
  let batchBytes = 0;
  let lineNo = 0;
  for await (const text of reader) {
    lineNo += 1;
    if (text.trim() === '') {
      bytes += Buffer.byteLength(text) + 1;
      continue;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new LineError(`line ${lineNo} is not valid JSON: ${(err as Error).message}`, lineNo, lines[0] ?? lineNo);
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new LineError(`line ${lineNo} must be a JSON object (a job spec)`, lineNo, lines[0] ?? lineNo);
    }
    const job = { ...defaults, ...(parsed as Record<string, unknown>) };
    const jobBytes = Buffer.byteLength(JSON.stringify(job)) + 1;
    if (jobBytes > maxBatchBytes) {
      throw new LineError(`line ${lineNo} is ${jobBytes} bytes of JSON, more than one request may carry (${maxBatchBytes})`, lineNo, lines[0] ?? lineNo);
    }
    if (jobs.length === FILE_CHUNK_JOBS || batchBytes + jobBytes > maxBatchBytes) {
      yield { jobs, lines, bytes };
      jobs = [];
      lines = [];
      bytes = 0;
      batchBytes = 0;
    }
    jobs.push(job);
    lines.push(lineNo);
    bytes += Buffer.byteLength(text) + 1;
    batchBytes += jobBytes;
  }
  if (jobs.length > 0 || bytes > 0) yield { jobs, lines, bytes };
}

export async function submitFile(
  client: Client,
  path: string,
  defaults: Record<string, unknown>,
  commandId: string | undefined,
): Promise<FileSubmitSummary> {
  let totalBytes: number | undefined;
  if (path !== '-') {
    try {
      totalBytes = statSync(path).size;
    } catch (err) {
      throw new InvalidRequestError(`cannot read --file ${path}: ${(err as Error).message}`);
    }
  }
  const bar = await progressBar(totalBytes);
  let total = 0;
  let created = 0;
  let existing = 0;
  let bytesDone = 0;
  let batch = 0;
  const failures: { line: number; error: ErrorBody }[] = [];
  const untilHere = (first: number) => `(nothing from line ${first} on was submitted; the ${total} jobs before it were)`;
  try {
    for await (const chunk of readChunks(path, defaults, batchBytesFor(client.nc.info?.max_payload))) {
      bytesDone += chunk.bytes;
      if (chunk.jobs.length > 0) {
        let reply;
        try {
          reply = await client.submitBatch(chunk.jobs as never, commandId === undefined ? {} : { id: `${commandId}:${batch}` });
        } catch (err) {
          if (!(err instanceof DocketError)) throw err;
          const first = chunk.lines[0]!;
          const byLine = issuesByLine(err, chunk.lines);
          if (byLine.length > 0) {
            // One line of output per refused line of the file, after the summary.
            const refused = byLine.map(({ line, message }) => `line ${line}: ${message}`);
            throw new DocketError(err.code, [`${byLine.length} line${byLine.length === 1 ? '' : 's'} refused ${untilHere(first)}`, ...refused].join('\n'), {
              cause: err,
              details: { lines: byLine, first_line_not_submitted: first, submitted: total, created, existing },
            });
          }
          throw new DocketError(err.code, `${nameLines(err.message, chunk.lines)} ${untilHere(first)}`, {
            cause: err,
            details: { ...(err.details ?? {}), first_line_not_submitted: first, submitted: total, created, existing },
          });
        }
        batch += 1;
        reply.jobs.forEach((item, i) => {
          total += 1;
          if (!item.ok) failures.push({ line: chunk.lines[i]!, error: item.error });
          else if (item.created) created += 1;
          else existing += 1;
        });
      }
      bar?.update(bytesDone, { jobs: total, failed: failures.length });
    }
  } catch (err) {
    if (!(err instanceof LineError)) throw err;
    throw new InvalidRequestError(`${err.message} ${untilHere(err.firstUnsent)}`, {
      details: { line: err.line, first_line_not_submitted: err.firstUnsent, submitted: total, created, existing },
    });
  } finally {
    bar?.stop();
  }
  return { total, created, existing, failed: failures.length, failures };
}
