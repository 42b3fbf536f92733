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
  /**
   * The same keys in the batches the source reads them in (a cursor's fetch, a stream's chunk):
   * what a refresh reads, since an async step per key costs more than the key itself.
   */
  batches(restrict?: Restriction): AsyncIterable<readonly Key[]>;
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
  return keySourceOf(createUnrestrictedSource(spec, options), options.maxKeys);
}

/** A kind's raw source with restrict and the key limit applied: the KeySource callers use. */
export function keySourceOf(base: RawKeySource, maxKeys: number = Limits.MaxSourceKeys): KeySource {
  const batches = (restrict?: Restriction) => limited(base, restrict, maxKeys);
  return {
    description: base.description,
    batches,
    async *keys(restrict?: Restriction) {
      for await (const batch of batches(restrict)) yield* batch;
    },
  };
}

/** What each kind implements: every key, normalised, in batches; no restriction, no limit. */
export interface RawKeySource {
  readonly description: string;
  batches(): AsyncIterable<readonly Key[]>;
}

/** Rows per batch where a source reads one row at a time (a stream, lines). */
export const BATCH_KEYS = 2_000;

function createUnrestrictedSource(spec: KeySourceSpec, options: KeySourceOptions): RawKeySource {
  const timeoutMs = options.defaultTimeoutMs ?? JobSetDefaults.keySourceTimeoutMs;
  if ('url' in spec) return createSqlSource(spec, { ...options, timeoutMs: spec.timeout_ms ?? timeoutMs });
  if ('command' in spec) return createCommandSource(spec, { ...options, timeoutMs: spec.timeout_ms ?? timeoutMs });
  if ('file' in spec) return createFileSource(spec, options);
  return createInlineSource(spec.keys, options);
}

async function* limited(source: RawKeySource, restrict: Restriction | undefined, maxKeys: number): AsyncGenerator<readonly Key[]> {
  let count = 0;
  for await (const batch of source.batches()) {
    count += batch.length;
    if (count > maxKeys) throw new InvalidRequestError(`key source ${source.description}: more than ${maxKeys} keys (the limit a refresh holds in memory)`, { details: { source: source.description } });
    const kept = restrict === undefined ? batch : batch.filter((key) => matchesRestriction(key, restrict));
    if (kept.length > 0) yield kept;
  }
}

/** `{keys: [...]}`: the keys given inline, normalised like any other source's. */
export function createInlineSource(keys: readonly unknown[], options: Pick<KeySourceOptions, 'attributes'> = {}): RawKeySource {
  const description = `inline keys (${keys.length})`;
  return {
    description,
    async *batches() {
      yield keys.map((row, i) => toKey(row, `${description} item ${i}`, { attributes: options.attributes }));
    },
  };
}

/** Reads a whole source into an array (what a refresh does before it plans). */
export async function readAllKeys(source: KeySource, restrict?: Restriction): Promise<Key[]> {
  const keys: Key[] = [];
  for await (const batch of source.batches(restrict)) for (const key of batch) keys.push(key);
  return keys;
}
