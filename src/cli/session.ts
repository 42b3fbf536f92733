/**
 * A client for one CLI command: connect to `--server` / NATS_URL / the default, run, close.
 * Failures to reach NATS or a docket node become `unavailable` with a message saying which.
 * The SDK is imported lazily so `docket --help` and `docket up` do not load it.
 */
import type { Client } from '../client/client.js';
import { DocketError, UnavailableError } from '../errors.js';
import { serverFrom } from './options.js';

export interface ConnectionFlags {
  readonly server?: string;
}

const CLOSE_TIMEOUT_MS = 2_000;

function describe(err: unknown): { name: string; message: string } {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? err.cause : undefined;
    return { name: cause?.name ?? err.name, message: cause ? `${err.message}: ${cause.message}` : err.message };
  }
  return { name: 'Error', message: String(err) };
}

/** Maps an error from talking to NATS into a DocketError; DocketErrors pass through. */
export function asDocketError(err: unknown, servers: string): DocketError {
  if (err instanceof DocketError) return err;
  const { name, message } = describe(err);
  if (name === 'NoRespondersError' || /no responders/i.test(message)) {
    return new UnavailableError(`no docket node is serving on ${servers} (start one with "docket up")`, { cause: err });
  }
  if (name === 'TimeoutError' || /timeout/i.test(message)) {
    return new UnavailableError(`no reply from a docket node on ${servers} in time`, { cause: err });
  }
  return new UnavailableError(`${message} (NATS at ${servers})`, { cause: err });
}

export async function withClient<T>(flags: ConnectionFlags, fn: (client: Client) => Promise<T>): Promise<T> {
  const [{ Client: ClientClass }, { DEFAULT_NATS_URL }] = await Promise.all([import('../client/client.js'), import('../nats/connection.js')]);
  const servers = serverFrom(flags.server) ?? DEFAULT_NATS_URL;
  let client: Client;
  try {
    client = await ClientClass.connect({ servers });
  } catch (err) {
    throw new UnavailableError(`cannot connect to NATS at ${servers}: ${describe(err).message}`, { cause: err });
  }
  try {
    return await fn(client);
  } catch (err) {
    throw asDocketError(err, servers);
  } finally {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      client.close().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
      }),
    ]);
    clearTimeout(timer);
    if (!client.nc.isClosed()) await client.nc.close().catch(() => undefined);
  }
}

/** An action's outcome other than an error (e.g. some items of a batch refused): main exits with it. */
export function setExitCode(code: number): void {
  if (code !== 0 || process.exitCode === undefined) process.exitCode = code;
}
