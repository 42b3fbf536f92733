/**
 * docket's errors. Every error that crosses the wire has a code from DESIGN; one table maps codes
 * to classes for the command service and the SDK client alike.
 */
export const ErrorCodes = {
  InvalidRequest: 'invalid_request',
  NotFound: 'not_found',
  InvalidTransition: 'invalid_transition',
  Conflict: 'conflict',
  StaleRun: 'stale_run',
  Paused: 'paused',
  Unavailable: 'unavailable',
} as const;
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

export interface ErrorBody {
  readonly code: ErrorCode;
  readonly message: string;
  readonly details?: Record<string, unknown>;
}

export class DocketError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;
  constructor(code: ErrorCode, message: string, options?: ErrorOptions & { details?: Record<string, unknown> }) {
    super(message, options);
    this.name = 'DocketError';
    this.code = code;
    this.details = options?.details;
  }
  toBody(): ErrorBody {
    return this.details === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, details: this.details };
  }
}

type Opts = ErrorOptions & { details?: Record<string, unknown> };

export class InvalidRequestError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.InvalidRequest, message, options);
    this.name = 'InvalidRequestError';
  }
}
export class NotFoundError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.NotFound, message, options);
    this.name = 'NotFoundError';
  }
}
/** Retrying this is a bug: the machine refused the transition. */
export class InvalidTransitionError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.InvalidTransition, message, options);
    this.name = 'InvalidTransitionError';
  }
}
/** A lost optimistic-concurrency race that deciding again did not resolve. */
export class ConflictError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.Conflict, message, options);
    this.name = 'ConflictError';
  }
}
/** The run named by a completion no longer holds its job (fencing). */
export class StaleRunError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.StaleRun, message, options);
    this.name = 'StaleRunError';
  }
}
export class PausedError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.Paused, message, options);
    this.name = 'PausedError';
  }
}
export class UnavailableError extends DocketError {
  constructor(message: string, options?: Opts) {
    super(ErrorCodes.Unavailable, message, options);
    this.name = 'UnavailableError';
  }
}

/** Thrown by a worker handler to fail its run without a retry (BullMQ's UnrecoverableError). */
export class NonRetryableJobError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'NonRetryableJobError';
  }
}

const CLASSES: Record<ErrorCode, new (message: string, options?: Opts) => DocketError> = {
  invalid_request: InvalidRequestError,
  not_found: NotFoundError,
  invalid_transition: InvalidTransitionError,
  conflict: ConflictError,
  stale_run: StaleRunError,
  paused: PausedError,
  unavailable: UnavailableError,
};

/** Rebuilds the typed error from a reply's `error` body (used by the SDK client). */
export function fromErrorBody(body: ErrorBody): DocketError {
  const Cls = CLASSES[body.code] ?? UnavailableError;
  return body.details === undefined ? new Cls(body.message) : new Cls(body.message, { details: body.details });
}

export function coerceError(err: unknown): Error {
  if (err instanceof Error) return err;
  return new Error(typeof err === 'string' ? err : JSON.stringify(err));
}

/**
 * `text` quoted for an error message, cut to `max` characters: a message names what it refers
 * to (a field, a subject) but must never repeat a hostile input of any size back to the sender.
 */
export function excerpt(text: string, max = 64): string {
  return JSON.stringify(text.length <= max ? text : `${text.slice(0, max)}…`);
}
