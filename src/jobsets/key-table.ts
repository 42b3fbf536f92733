/**
 * A queue's keys by their values: an open-addressing hash table from a flat key (an object of
 * scalar attributes, as every key source yields: key.ts) to its slot in the key index, so that a
 * refresh finds each source key's slot without building its identity string. Building and hashing
 * a million identity strings was the larger part of a refresh that adds nothing (a fresh string
 * is flattened and hashed by the Map, then compared with the stored one: 0.6 µs a key at 100,000
 * keys, 1 µs at a million, in a micro-benchmark; this table: 0.06 and 0.2).
 *
 * Two flat keys have the same identity (keyIdentity: canonical JSON) exactly when they have the
 * same attribute names and `===` values: a number's JSON text is its shortest round-trip form,
 * -0 prints as 0 (and -0 === 0), a string's JSON is its characters, null and booleans print as
 * themselves. So the hash combines, per attribute, the name's and the value's hash by a sum
 * (attribute order does not change a key's identity), and a candidate is confirmed by its
 * attribute count and values. A key that is not flat (a string key, nested values) or holds a
 * value JSON would not keep (undefined, a non-finite number) is not held here: no source key has
 * its identity. Such keys only come from in-process objects; the log's keys are JSON.
 */

type FlatKey = Readonly<Record<string, unknown>>;

/** FNV-1a over the UTF-16 units. */
function stringHash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h;
}

/** Attribute names repeat across a queue's keys: each one's hash is computed once. */
const nameHashes = new Map<string, number>();
const MAX_NAME_HASHES = 10_000;

function nameHash(name: string): number {
  let h = nameHashes.get(name);
  if (h === undefined) {
    h = stringHash(name);
    if (nameHashes.size < MAX_NAME_HASHES) nameHashes.set(name, h);
  }
  return h;
}

const float = new Float64Array(1);
const floatWords = new Uint32Array(float.buffer);

/** A scalar's hash (equal for `===` values, so 0 and -0 alike); NaN when the value is not one a key holds. */
function valueHash(value: unknown): number {
  switch (typeof value) {
    case 'number':
      if ((value | 0) === value) return Math.imul(value | 0, 0x9e3779b1);
      if (!Number.isFinite(value)) return Number.NaN;
      float[0] = value;
      return Math.imul(floatWords[0]! ^ 0x2545f491, 0x85ebca6b) ^ floatWords[1]!;
    case 'string':
      return stringHash(value) ^ 0x5bd1e995;
    case 'boolean':
      return value ? 0x165667b1 : 0x3c6ef372;
    case 'object':
      return value === null ? 0x27d4eb2f : Number.NaN;
    default:
      return Number.NaN;
  }
}

/** Murmur3's finaliser: spreads the sum's bits over the low ones the table indexes by. */
function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) | 0;
}

/** Set by hashOf beside its result: the key's attribute count (a second result without a pair object per lookup). */
let lastCount = 0;

/** The key's hash, or NaN when it is not a flat key of scalars; its attribute count in lastCount. */
function hashOf(key: unknown): number {
  if (key === null || typeof key !== 'object' || Array.isArray(key)) return Number.NaN;
  let sum = 0;
  let count = 0;
  for (const name in key as FlatKey) {
    const v = valueHash((key as FlatKey)[name]);
    if (Number.isNaN(v)) return Number.NaN;
    sum = (sum + mix(nameHash(name) ^ v)) | 0;
    count += 1;
  }
  lastCount = count;
  return count === 0 ? Number.NaN : mix(sum ^ count);
}

/** Positions in a new table (a power of two). */
const INITIAL_CAPACITY = 1024;

export class KeyTable {
  /**
   * Two numbers per position, side by side so a probe reads one cache line: the key's hash (a
   * probe skips other keys without reading them) and its slot + 1 (0: empty).
   */
  private positions = new Int32Array(INITIAL_CAPACITY * 2);
  /** Per slot: the key held (the object the slot's first job was submitted with). */
  private readonly keys: (FlatKey | undefined)[] = [];
  private size = 0;

  /** Holds `key` under `slot` (a new slot: each identity is added once); a key that is not flat is left out. */
  add(key: unknown, slot: number): void {
    const hash = hashOf(key);
    if (Number.isNaN(hash)) return;
    if ((this.size + 1) * 4 > this.positions.length) this.grow();
    this.keys[slot] = key as FlatKey;
    this.place(hash, slot + 1);
    this.size += 1;
  }

  /** The slot of the key with `key`'s identity, or -1 when none is held. */
  slotOf(key: unknown): number {
    const hash = hashOf(key);
    if (Number.isNaN(hash)) return -1;
    const count = lastCount;
    const { positions } = this;
    const mask = positions.length - 2;
    for (let at = (hash << 1) & mask; ; at = (at + 2) & mask) {
      const entry = positions[at + 1]!;
      if (entry === 0) return -1;
      if (positions[at] === hash && sameKey(key as FlatKey, count, this.keys[entry - 1]!)) return entry - 1;
    }
  }

  /** The key held under `slot`: the one add was given (undefined when it was not flat). */
  keyAt(slot: number): FlatKey | undefined {
    return this.keys[slot];
  }

  private place(hash: number, entry: number): void {
    const { positions } = this;
    const mask = positions.length - 2;
    let at = (hash << 1) & mask;
    while (positions[at + 1] !== 0) at = (at + 2) & mask;
    positions[at] = hash;
    positions[at + 1] = entry;
  }

  private grow(): void {
    const old = this.positions;
    this.positions = new Int32Array(old.length * 2);
    for (let at = 0; at < old.length; at += 2) if (old[at + 1] !== 0) this.place(old[at]!, old[at + 1]!);
  }
}

/**
 * Whether `held` has `count` attributes (as `key` has) and every attribute of `key` with the same
 * value: then they are the same attributes and values. A name `held` lacks reads undefined or an
 * Object.prototype member, never a key's scalar.
 */
function sameKey(key: FlatKey, count: number, held: FlatKey): boolean {
  for (const name in key) if (held[name] !== key[name]) return false;
  let heldCount = 0;
  for (const _ in held) heldCount += 1;
  return heldCount === count;
}
