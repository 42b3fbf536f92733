/**
 * The CLI's inputs that do not come from commander: the environment (the only place docket reads
 * `process.env`), and the parsing of flag values into what commands take. A bad value is an
 * InvalidRequestError, reported exactly like a command the server refused.
 */
import { InvalidRequestError } from '../errors.js';
import { LIVE_EVENT_MODES, type LiveEventMode } from '../nats/subjects.js';

export interface CliEnvironment {
  /** `NATS_URL`: the server to use when no `--server` is given. */
  readonly natsUrl: string | undefined;
  /** `DOCKET_LOG_LEVEL`: the log level when no `--log-level` is given. */
  readonly logLevel: string | undefined;
  /** `DOCKET_LOCAL_NATS_PORT`: the port `docket up` probes and starts a local nats-server on. */
  readonly localNatsPort: number | undefined;
  /** `NATS_SERVER_BIN`: the nats-server binary `docket up` starts. */
  readonly natsServerBin: string | undefined;
  /** `DOCKET_FINISHED_RETENTION_MS`: how long `docket up` keeps a finished job's body in memory. */
  readonly finishedRetentionMs: number | undefined;
  /** `DOCKET_LIVE_EVENTS`: what `docket up` publishes live when no `--live-events` is given. */
  readonly liveEvents: string | undefined;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

export function readEnvironment(env: NodeJS.ProcessEnv = process.env): CliEnvironment {
  const localPort = nonEmpty(env['DOCKET_LOCAL_NATS_PORT']);
  const retention = nonEmpty(env['DOCKET_FINISHED_RETENTION_MS']);
  return {
    natsUrl: nonEmpty(env['NATS_URL']),
    logLevel: nonEmpty(env['DOCKET_LOG_LEVEL']),
    localNatsPort: localPort === undefined ? undefined : parsePort(localPort, 'DOCKET_LOCAL_NATS_PORT'),
    natsServerBin: nonEmpty(env['NATS_SERVER_BIN']),
    finishedRetentionMs: retention === undefined ? undefined : parsePositiveInteger(retention, 'DOCKET_FINISHED_RETENTION_MS'),
    liveEvents: nonEmpty(env['DOCKET_LIVE_EVENTS']),
  };
}

/** The NATS URL a command uses: `--server`, else `NATS_URL`, else undefined (the default). */
export function serverFrom(flag: string | undefined, env: CliEnvironment = readEnvironment()): string | undefined {
  return nonEmpty(flag) ?? env.natsUrl;
}

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export function parseLogLevel(value: string, name = '--log-level'): LogLevel {
  const level = value.trim().toLowerCase();
  if ((LOG_LEVELS as readonly string[]).includes(level)) return level as LogLevel;
  throw new InvalidRequestError(`${name} must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(value)}`);
}

export function parseLiveEvents(value: string, name = '--live-events'): LiveEventMode {
  const mode = value.trim().toLowerCase();
  if ((LIVE_EVENT_MODES as readonly string[]).includes(mode)) return mode as LiveEventMode;
  throw new InvalidRequestError(`${name} must be one of ${LIVE_EVENT_MODES.join(', ')}, got ${JSON.stringify(value)}`);
}

/** An integer flag. Ranges are the server's to check, so its message names the field. */
export function parseInteger(value: string, name: string): number {
  if (!/^-?\d+$/.test(value.trim())) throw new InvalidRequestError(`${name} must be an integer, got ${JSON.stringify(value)}`);
  return Number(value.trim());
}

export function parsePositiveInteger(value: string, name: string): number {
  const n = parseInteger(value, name);
  if (n < 1) throw new InvalidRequestError(`${name} must be at least 1, got ${n}`);
  return n;
}

export function parsePort(value: string, name: string): number {
  const n = parseInteger(value, name);
  if (n < 1 || n > 65535) throw new InvalidRequestError(`${name} must be a port (1-65535), got ${n}`);
  return n;
}

/** A JSON flag (`--params`): must parse, and must be an object. */
export function parseJsonObject(value: string, name: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (err) {
    throw new InvalidRequestError(`${name} is not valid JSON: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new InvalidRequestError(`${name} must be a JSON object`);
  }
  return parsed as Record<string, unknown>;
}

/**
 * `--key`: a JSON object (`{"subject_id":42}`) is a structured key; a JSON string (`'"a"'`) is
 * that string; anything else is taken as the literal string (`--key user-42`, `--key 42`).
 */
export function parseKey(value: string): string | Record<string, unknown> {
  const trimmed = value.trim();
  if (trimmed.startsWith('{') || trimmed.startsWith('"')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch (err) {
      throw new InvalidRequestError(`--key looks like JSON but does not parse: ${(err as Error).message}`);
    }
    if (typeof parsed === 'string') return parsed;
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
  }
  return value;
}

/** `--run-at`: an ISO-8601 time; normalised so the server's check sees an offset. */
export function parseIsoTime(value: string, name: string): string {
  const ms = Date.parse(value);
  if (Number.isNaN(ms) || !/^\d{4}-\d{2}-\d{2}/.test(value.trim())) {
    throw new InvalidRequestError(`${name} must be an ISO-8601 time (e.g. 2030-01-01T09:00:00Z), got ${JSON.stringify(value)}`);
  }
  return new Date(ms).toISOString();
}

/** `tail --from`: 'now', 'all', a stream sequence, or an ISO-8601 time. */
export function parseFrom(value: string): 'now' | 'all' | number | Date {
  const v = value.trim();
  if (v === 'now' || v === 'all') return v;
  if (/^\d+$/.test(v)) {
    const seq = Number(v);
    if (seq < 1) throw new InvalidRequestError('--from sequence must be at least 1');
    return seq;
  }
  return new Date(parseIsoTime(v, '--from'));
}
