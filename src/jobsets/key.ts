/**
 * A job set's key: an object of scalar attributes (DataJoint's primary key of a key_source row),
 * and the ONE normalisation every key source applies to its values, so that the same row is the
 * same key whether it comes from PostgreSQL, MariaDB/MySQL, a command, a file or inline JSON:
 *
 * | value | key attribute |
 * | --- | --- |
 * | null (SQL NULL) | null |
 * | boolean (PostgreSQL bool, JSON true/false) | 1 or 0: MySQL has no boolean type (BOOLEAN is TINYINT(1), which holds -128..127), so numbers are the form both sides can give without losing a value |
 * | integer (int2/int4/int8, TINYINT..BIGINT, signed or unsigned) | a JSON number when it is a safe integer (abs ≤ 2^53 - 1), else its decimal text |
 * | numeric/DECIMAL | a JSON number when its value is a safe integer ("10.00" → 10), else the database's text, which both print with the column's scale ("1.50") |
 * | float/double | a JSON number (non-finite values are refused) |
 * | DATE | "YYYY-MM-DD" |
 * | timestamp, timestamptz, DATETIME, TIMESTAMP | ISO-8601 in UTC: "YYYY-MM-DDTHH:MM:SS.sssZ"; digits past milliseconds are kept when not zero (".123456Z"); a value without a zone (timestamp, DATETIME) is read as UTC |
 * | bytea, BINARY/VARBINARY/BLOB, BIT | lowercase hex of the bytes, no prefix ("0a1b") |
 * | text, varchar, char, uuid, time, enum | the string as the driver gives it |
 * | anything else (JSON objects, arrays) | refused, naming the attribute |
 *
 * The key's identity is `canonicalJson(key)` (src/ids.ts), the string keyed job ids are derived
 * from, so a key from a source and the same key submitted by hand name the same job.
 */
import { InvalidRequestError, excerpt } from '../errors.js';
import { canonicalJson } from '../ids.js';
import { Limits } from '../commands/limits.js';

export type KeyValue = string | number | null;
/** A normalised key: attribute → scalar. Booleans never appear (they become 1/0). */
export type Key = Readonly<Record<string, KeyValue>>;

/** Where a key came from, for error messages: "postgres://u@h/db", "file keys.jsonl line 3". */
export type KeyOrigin = string;

/** Object fields that would reach a prototype (JSON.parse makes `__proto__` an own key). */
const RESERVED = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * The origin, or a function that tells it: a source of a million rows names the row only when
 * one is refused, rather than building a million origin strings.
 */
export type KeyOriginOf = KeyOrigin | (() => KeyOrigin);

function refuse(originOf: KeyOriginOf, message: string): never {
  const origin = typeof originOf === 'function' ? originOf() : originOf;
  throw new InvalidRequestError(`key source ${origin}: ${message}`, { details: { source: origin } });
}

/** Decimal text of an integer column: a number when safe, else the text (digits kept exactly). */
export function integerFromText(text: string): number | string {
  const n = Number(text);
  return Number.isSafeInteger(n) && /^-?\d+$/.test(text) ? (n === 0 ? 0 : n) : text;
}

const INTEGRAL_DECIMAL = /^(-?\d+)(?:\.0+)?$/;
/** Text of a numeric/DECIMAL column: a number when its value is a safe integer, else the text. */
export function decimalFromText(text: string): number | string {
  const m = INTEGRAL_DECIMAL.exec(text);
  if (m === null) return text;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? (n === 0 ? 0 : n) : text;
}

const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}(?::?\d{2}){0,2})?$/;

/**
 * A timestamp's text (either database's output, with or without a zone) as ISO-8601 UTC. Text
 * outside that form (PostgreSQL's `infinity`, BC dates, MySQL's zero date) is kept as it is.
 */
export function timestampFromText(text: string): string {
  const m = TIMESTAMP.exec(text);
  if (m === null) return text;
  const [, y, mo, d, h, mi, s, fraction = '', zone = 'Z'] = m;
  let offsetS = 0;
  if (zone !== 'Z') {
    const sign = zone.startsWith('-') ? -1 : 1;
    const digits = zone.slice(1).replaceAll(':', '');
    offsetS = sign * (Number(digits.slice(0, 2)) * 3600 + Number(digits.slice(2, 4) || '0') * 60 + Number(digits.slice(4, 6) || '0'));
  }
  const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) - offsetS * 1000;
  // Date.UTC maps years 0-99 to 1900-1999; such keys are rare enough to keep as text.
  if (!Number.isFinite(ms) || Number(y) < 100) return text;
  const whole = new Date(ms).toISOString().slice(0, 19);
  return `${whole}.${fractionDigits(fraction)}Z`;
}

/** Milliseconds always (as Date#toISOString), finer digits only when they are not zero. */
function fractionDigits(fraction: string): string {
  const trimmed = fraction.replace(/0+$/, '');
  return trimmed.length <= 3 ? trimmed.padEnd(3, '0') : trimmed;
}

/** A Date as the normalised timestamp text (milliseconds: all a Date holds). */
export function timestampFromDate(date: Date, origin: KeyOriginOf, attribute: string): string {
  if (Number.isNaN(date.getTime())) refuse(origin, `attribute ${excerpt(attribute)} is an invalid date`);
  return date.toISOString();
}

/** One attribute's value, normalised (see the table above). */
export function normaliseValue(value: unknown, origin: KeyOriginOf, attribute: string): KeyValue {
  switch (typeof value) {
    case 'string':
      return value;
    case 'number':
      if (!Number.isFinite(value)) refuse(origin, `attribute ${excerpt(attribute)} is ${String(value)}, not a finite number`);
      return value === 0 ? 0 : value; // -0 and 0 are one key
    case 'boolean':
      return value ? 1 : 0;
    case 'bigint':
      return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString();
    case 'undefined':
      return null;
    case 'object':
      if (value === null) return null;
      if (value instanceof Date) return timestampFromDate(value, origin, attribute);
      if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
      return refuse(origin, `attribute ${excerpt(attribute)} is ${Array.isArray(value) ? 'an array' : 'an object'}: a key attribute must be a scalar`);
    default:
      return refuse(origin, `attribute ${excerpt(attribute)} is a ${typeof value}: a key attribute must be a scalar`);
  }
}

export interface ToKeyOptions {
  /**
   * The attributes the job set declares: the key is the row projected onto them (extra columns
   * dropped, as DataJoint keeps only the primary key), and a row lacking one is refused.
   * Without it the key is the whole row.
   */
  readonly attributes?: readonly string[] | undefined;
}

/**
 * A row (driver output or parsed JSON) as a normalised key. Refused, naming the origin: a value
 * that is not an object, an attribute that is not a scalar, a missing declared attribute, an
 * empty key, or one over Limits.MaxKeyBytes of JSON.
 */
export function toKey(row: unknown, origin: KeyOriginOf, options: ToKeyOptions = {}): Key {
  if (row === null || typeof row !== 'object' || Array.isArray(row)) refuse(origin, 'a key must be a JSON object of attributes');
  const source = row as Record<string, unknown>;
  const names = options.attributes ?? Object.keys(source);
  if (names.length === 0) refuse(origin, 'a key must have at least one attribute');
  // A plain object is safe to fill: the names that would reach its prototype are refused first.
  const key: Record<string, KeyValue> = {};
  let bound = BRACES_BOUND;
  for (const name of names) {
    if (RESERVED.has(name)) refuse(origin, `attribute name ${excerpt(name)} is not allowed`);
    if (!Object.hasOwn(source, name)) refuse(origin, `the key lacks the attribute ${excerpt(name)} the job set declares`);
    const value = normaliseValue(source[name], origin, name);
    key[name] = value;
    bound += nameBound(name) + valueBound(value);
  }
  return withinSize(key, bound, origin);
}

/**
 * Rows as arrays of column values (a driver's array row mode) as keys: the same keys toKey makes
 * of the same rows as objects (`{column: value}`, a repeated column name taking its last value),
 * with what depends only on the columns done once per result rather than once per row: which
 * column each attribute takes, the refusal of reserved and missing names, and the names' share
 * of the size bound. A row is named in a refusal only then: `${description} row ${n}`.
 */
export class ColumnKeys {
  /** The key's attributes, in the order toKey gives them. */
  private readonly names: readonly string[];
  /** Per attribute, the column it takes its value from. */
  private readonly columnOf: readonly number[];
  private readonly namesBound: number;
  /** The row being made a key: the origin a refusal names. */
  private row = 0;
  private readonly origin = (): KeyOrigin => `${this.description} row ${this.row}`;

  /** Refuses, naming row `firstRow`, columns no key can be made of (make it when the first row arrives). */
  constructor(columns: readonly string[], private readonly description: string, firstRow: number, options: ToKeyOptions = {}) {
    this.row = firstRow;
    // The object toKey would be given: its own names, in JavaScript's order (integer-like names
    // first), each with its last column.
    const lastColumn: Record<string, number> = Object.create(null) as Record<string, number>;
    columns.forEach((column, i) => {
      lastColumn[column] = i;
    });
    const names = options.attributes ?? Object.keys(lastColumn);
    if (names.length === 0) refuse(this.origin, 'a key must have at least one attribute');
    let bound = BRACES_BOUND;
    for (const name of names) {
      if (RESERVED.has(name)) refuse(this.origin, `attribute name ${excerpt(name)} is not allowed`);
      if (!Object.hasOwn(lastColumn, name)) refuse(this.origin, `the key lacks the attribute ${excerpt(name)} the job set declares`);
      bound += nameBound(name);
    }
    this.names = names;
    this.columnOf = names.map((name) => lastColumn[name]!);
    this.namesBound = bound;
  }

  /** Row number `row` (from 1), its values in column order, as a key. */
  keyOf(values: readonly unknown[], row: number): Key {
    this.row = row;
    const { names, columnOf } = this;
    const key: Record<string, KeyValue> = {};
    let bound = this.namesBound;
    for (let i = 0; i < names.length; i++) {
      const value = normaliseValue(values[columnOf[i]!], this.origin, names[i]!);
      key[names[i]!] = value;
      bound += valueBound(value);
    }
    return withinSize(key, bound, this.origin);
  }
}

// An upper bound on a key's JSON length (UTF-16 units): braces, and per attribute its quoted
// name (a character escapes to at most 6), colon and comma, and its value (a number's text is at
// most 24 characters).
const BRACES_BOUND = 2;
const nameBound = (name: string) => name.length * 6 + 4;
const valueBound = (value: KeyValue) => (typeof value === 'string' ? value.length * 6 + 2 : 24);

/** The key, unless its JSON is over Limits.MaxKeyBytes (refused); `bound` is its length's upper bound. */
function withinSize(key: Key, bound: number, origin: KeyOriginOf): Key {
  // A UTF-16 unit is at most 3 bytes of UTF-8, so a key whose bound fits needs no JSON at all
  // (a million-key source would otherwise stringify each key once more).
  if (bound * 3 <= Limits.MaxKeyBytes) return key;
  // Attribute order does not change the size, so plain JSON measures the canonical text.
  const json = JSON.stringify(key);
  if (json.length * 3 > Limits.MaxKeyBytes) {
    const bytes = Buffer.byteLength(json);
    if (bytes > Limits.MaxKeyBytes) refuse(origin, `a key is ${bytes} bytes of JSON, over the ${Limits.MaxKeyBytes} allowed`);
  }
  return key;
}

/** `"name":` per attribute name seen: keys of one source repeat a handful of names. */
const quotedNames = new Map<string, string>();
const MAX_QUOTED_NAMES = 10_000;

function quotedName(name: string): string {
  let quoted = quotedNames.get(name);
  if (quoted === undefined) {
    quoted = `${JSON.stringify(name)}:`;
    if (quotedNames.size < MAX_QUOTED_NAMES) quotedNames.set(name, quoted);
  }
  return quoted;
}

/**
 * The key's identity: exactly `canonicalJson(key)` (src/ids.ts), the string keyed job ids are
 * derived from, written by hand for the flat objects of scalars that keys are (a million-key
 * refresh computes one per source key and per job; canonicalJson's entries + sort + map cost
 * about 2 µs a key, this about 0.3). Anything else (a hand-submitted key may be a string or
 * nested JSON) goes through canonicalJson itself. test/jobsets/key.test.ts checks they agree.
 */
export function keyIdentity(key: unknown): string {
  if (key === null || typeof key !== 'object' || Array.isArray(key)) return canonicalJson(key);
  const record = key as Record<string, unknown>;
  const names = Object.keys(record);
  for (let i = 1; i < names.length; i++) {
    if (names[i - 1]! > names[i]!) {
      names.sort();
      break;
    }
  }
  let out = '{';
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const value = record[name];
    let text: string;
    if (typeof value === 'number') text = Number.isFinite(value) ? String(value) : 'null';
    else if (typeof value === 'string') text = JSON.stringify(value);
    else if (value === null || typeof value === 'boolean') text = String(value);
    else return canonicalJson(key);
    out += i === 0 ? quotedName(name) + text : `,${quotedName(name)}${text}`;
  }
  return `${out}}`;
}
