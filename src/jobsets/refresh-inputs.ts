/**
 * What a refresh reads before it plans: the job set's whole key source and its target, both to
 * the end (so a failure of either appends nothing), read at the same time. Declared attributes
 * project the source's rows; target rows are kept whole, since they are matched on the source
 * key's attributes and may carry more (seed 000's legacy non-FK primary key parts).
 */
import type { KeySourceSpec } from '../commands/jobset-schemas.js';
import type { Key } from './key.js';
import { SourceKeys, type KeyedJobs } from './plan.js';
import { createKeySource, readAllKeys, type KeySource, type KeySourceOptions } from './source.js';

export interface JobSetSources {
  readonly key_source: KeySourceSpec;
  readonly target?: KeySourceSpec | undefined;
  readonly attributes?: readonly string[] | undefined;
}

export interface RefreshInputs {
  readonly source: Key[];
  /** Empty without a target: nothing is computed yet. */
  readonly target: Key[];
}

export async function readRefreshInputs(jobSet: JobSetSources, options: Omit<KeySourceOptions, 'attributes'>): Promise<RefreshInputs> {
  return readInputs(jobSet, options, (source) => readAllKeys(source));
}

/**
 * The same read for a refresh: the source's keys go into SourceKeys batch by batch as they
 * arrive, each looked up in the job view while the next batch is on its way.
 */
export async function readRefreshSource(jobSet: JobSetSources, options: Omit<KeySourceOptions, 'attributes'>, jobs: KeyedJobs): Promise<{ readonly source: SourceKeys; readonly target: Key[] }> {
  return readInputs(jobSet, options, async (source) => {
    const keys = new SourceKeys(jobs);
    for await (const batch of source.batches()) keys.add(batch);
    return keys;
  });
}

async function readInputs<S>(jobSet: JobSetSources, options: Omit<KeySourceOptions, 'attributes'>, readSource: (source: KeySource) => Promise<S>): Promise<{ readonly source: S; readonly target: Key[] }> {
  const source = readSource(createKeySource(jobSet.key_source, { ...options, attributes: jobSet.attributes }));
  const target = jobSet.target === undefined ? Promise.resolve([]) : readAllKeys(createKeySource(jobSet.target, options));
  // Both settle before either failure is reported, so no read is left running behind an error.
  const [s, t] = await Promise.allSettled([source, target]);
  if (s.status === 'rejected') throw s.reason;
  if (t.status === 'rejected') throw t.reason;
  return { source: s.value, target: t.value };
}
