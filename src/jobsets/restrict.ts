/**
 * A refresh's restriction (DataJoint's `refresh(*restrictions)`), as data: one object of
 * attribute values (all must match: AND) or a list of them (any may match: OR). A key matches an
 * object when it has every attribute the object names, with the same normalised value. Unlike
 * DataJoint, which ignores restriction attributes outside the table's heading, an attribute the
 * key lacks makes it NOT match: a misspelt attribute must narrow to nothing, not queue everything.
 * Pure: no I/O.
 */
import { canonicalJson } from '../ids.js';
import type { Key, KeyValue } from './key.js';

export type RestrictionTerm = Readonly<Record<string, KeyValue>>;
export type Restriction = RestrictionTerm | readonly RestrictionTerm[];

function matchesTerm(key: Key, term: RestrictionTerm): boolean {
  for (const [name, value] of Object.entries(term)) {
    if (!Object.hasOwn(key, name)) return false;
    const have = key[name];
    // Scalars: equal values have equal JSON (1 and 1.0 alike), and strings never equal numbers.
    if (have !== value && canonicalJson(have) !== canonicalJson(value)) return false;
  }
  return true;
}

/** Whether `key` is within `restriction` (no restriction: every key). An empty list matches nothing. */
export function matchesRestriction(key: Key, restriction: Restriction | undefined): boolean {
  if (restriction === undefined) return true;
  if (Array.isArray(restriction)) return (restriction as readonly RestrictionTerm[]).some((term) => matchesTerm(key, term));
  return matchesTerm(key, restriction as RestrictionTerm);
}
