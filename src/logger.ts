/**
 * The root logger and the binding keys child loggers may use. pino's rule: never bind names
 * taken from user input; params go under a redacted `payload`.
 */
import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

export type LogBindings = Partial<
  Record<'component' | 'queue' | 'jobId' | 'runId' | 'command' | 'commandId' | 'seq' | 'workerId' | 'node', string | number>
>;

export interface LoggerConfig {
  /** @defaultValue 'info' */
  readonly level?: string;
  /** Human-readable lines (pino-pretty) instead of JSON, for a terminal. @defaultValue false */
  readonly pretty?: boolean;
  /** File descriptor to write to. @defaultValue 2 (stderr) */
  readonly fd?: number;
}

export function createLogger(config: LoggerConfig = {}): Logger {
  const options: LoggerOptions = { level: config.level ?? 'info', redact: ['payload'] };
  const fd = config.fd ?? 2;
  if (config.pretty) {
    return pino({ ...options, transport: { target: 'pino-pretty', options: { destination: fd, colorize: true } } });
  }
  return pino(options, pino.destination({ fd, sync: true }));
}

/** A logger that writes nothing: the default for library use when none is given. */
export const silentLogger: Logger = pino({ level: 'silent' });

/**
 * A child logger with these bindings, or the logger itself when it writes nothing: a child of a
 * silent logger is an allocation for nothing, and a Worker makes one per job (with no logger
 * given, ~430 bytes a job that lived long enough to reach V8's old space at concurrency 100).
 */
export function childLogger(log: Logger, bindings: LogBindings): Logger {
  return log.isLevelEnabled('fatal') ? log.child(bindings) : log;
}
