/**
 * Key sources and targets (DataJoint's key_source and target table): one interface, one module
 * per kind. `keys()` is an async iterable so a million-row query streams instead of arriving as
 * one array; every key it yields is already normalised (key.ts). A source that fails (database
 * unreachable, query refused, command exits non-zero, file missing) throws InvalidRequestError
 * naming the source with the driver's or command's message. A refresh reads its sources to the
 * end before it decides anything, so a failure part-way appends nothing.
 *
 * The environment (for password_env and the command's environment) and the working directory
 * come in through options: only src/cli reads process.env (STYLE 2.10).
 */
import { InvalidRequestError } from '../errors.js';
import type { KeySourceSpec } from '../commands/jobset-schemas.js';
import { JobSetDefaults, Limits } from '../commands/limits.js';
import { toKey, type Key } from './key.js';
import { matchesRestriction, type Restriction } from './restrict.js';
import { createSqlSource } from './sql-source.js';
import { createCommandSource } from './command-source.js';
import { createFileSource } from './file-source.js';

export interface KeySource {
  /** The source as a person reads it in messages; never holds a password. */
  readonly description: string;
  /**
   * The source's keys, normalised, in the source's order; with `restrict`, only those within it
   * (filtered here, not pushed into the query: a refresh needs the whole source anyway to tell
   * stale jobs, seed 000 step 3).
   */
  keys(restrict?: Restriction): AsyncIterable<Key>;
}

export interface KeySourceOptions {
  /** The node's environment: password_env is read from it, and a command runs with it. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Where a relative file path or a command runs. @defaultValue the process's working directory */
  readonly cwd?: string | undefined;
  /** The job set's declared attributes: keys are projected onto them (key.ts toKey). */
  readonly attributes?: readonly string[] | undefined;
  /** @defaultValue Limits.MaxSourceKeys */
  readonly maxKeys?: number | undefined;
  /** A query's or command's timeout when its spec names none. @defaultValue JobSetDefaults.keySourceTimeoutMs */
  readonly defaultTimeoutMs?: number | undefined;
}

/** Builds the source a spec names (the spec is validated: src/commands/jobset-schemas.ts). */
export function createKeySource(spec: KeySourceSpec, options: KeySourceOptions): KeySource {
  const base = createUnrestrictedSource(spec, options);
  const maxKeys = options.maxKeys ?? Limits.MaxSourceKeys;
  return {
    description: base.description,
    keys: (restrict?: Restriction) => limited(base, restrict, maxKeys),
  };
}

/** What each kind implements: every key, normalised, no restriction, no limit. */
export interface RawKeySource {
  readonly description: string;
  keys(): AsyncIterable<Key>;
}

function createUnrestrictedSource(spec: KeySourceSpec, options: KeySourceOptions): RawKeySource {
  const timeoutMs = options.defaultTimeoutMs ?? JobSetDefaults.keySourceTimeoutMs;
  if ('url' in spec) return createSqlSource(spec, { ...options, timeoutMs: spec.timeout_ms ?? timeoutMs });
  if ('command' in spec) return createCommandSource(spec, { ...options, timeoutMs: spec.timeout_ms ?? timeoutMs });
  if ('file' in spec) return createFileSource(spec, options);
  return createInlineSource(spec.keys, options);
}

async function* limited(source: RawKeySource, restrict: Restriction | undefined, maxKeys: number): AsyncGenerator<Key> {
  let count = 0;
  for await (const key of source.keys()) {
    count += 1;
    if (count > maxKeys) throw new InvalidRequestError(`key source ${source.description}: more than ${maxKeys} keys (the limit a refresh holds in memory)`, { details: { source: source.description } });
    if (matchesRestriction(key, restrict)) yield key;
  }
}

/** `{keys: [...]}`: the keys given inline, normalised like any other source's. */
export function createInlineSource(keys: readonly unknown[], options: Pick<KeySourceOptions, 'attributes'> = {}): RawKeySource {
  const description = `inline keys (${keys.length})`;
  return {
    description,
    async *keys() {
      for (const [i, row] of keys.entries()) yield toKey(row, `${description} item ${i}`, { attributes: options.attributes });
    },
  };
}

/** Reads a whole source into an array (what a refresh does before it plans). */
export async function readAllKeys(source: KeySource, restrict?: Restriction): Promise<Key[]> {
  const keys: Key[] = [];
  for await (const key of source.keys(restrict)) keys.push(key);
  return keys;
}
