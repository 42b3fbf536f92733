/** Helpers for the tests of the shipped JSON Schemas. */

type Json = { [key: string]: unknown };

/**
 * The same schema with every open object closed (`additionalProperties: {}` made false): it
 * accepts only fields the schema documents. The shipped schemas of replies and events are open;
 * the tests check with the closed copy that the node writes no field they do not document.
 * Not for schemas whose objects meet in an allOf (closing each part would refuse the other's fields).
 */
export function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Json = Object.fromEntries(
    Object.entries(schema).map(([k, v]) => [k, k === 'properties' ? Object.fromEntries(Object.entries(v as Json).map(([p, s]) => [p, closed(s)])) : closed(v)]),
  );
  if ('properties' in out && JSON.stringify(out['additionalProperties']) === '{}') out['additionalProperties'] = false;
  return out;
}
