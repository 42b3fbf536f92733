/**
 * `{url: "postgres://…" | "mysql://…", sql: "SELECT …", password_env?}`: the rows of a query on
 * PostgreSQL (pg) or MariaDB/MySQL (mysql2), each row a key of its columns.
 *
 * - The URL never holds a password (jobset-schemas.ts refuses one); `password_env` names the
 *   environment variable it is read from, on whichever node reads the source.
 * - The query runs in a READ ONLY transaction: a key source can read, never write.
 * - Rows stream: PostgreSQL through a server-side cursor fetched in batches, MariaDB/MySQL as
 *   a row stream, so a million keys never sit in the driver as one result. PostgreSQL's rows
 *   come as arrays and become keys through key.ts ColumnKeys (the columns matched to the key's
 *   attributes once per result); MariaDB's come as objects, each made a key by toKey: the same
 *   keys either way (test/jobsets/sql-source.int.test.ts compares them).
 * - Values are converted by column type, as text where the drivers would lose or reinterpret
 *   them (int8/BIGINT beyond 2^53, DECIMAL, DATE as local midnight, zone-less timestamps as
 *   local time), then normalised by key.ts: the same row gives the same key from either database.
 */
import type PgDriver from 'pg';
import type { FieldPacket, TypeCastField, TypeCastNext } from 'mysql2';
import { InvalidRequestError } from '../errors.js';
import { DatabaseSchemes, databaseUrlProblem, type SqlSourceSpec } from '../commands/jobset-schemas.js';
import { JobSetDefaults } from '../commands/limits.js';
import { ColumnKeys, decimalFromText, integerFromText, timestampFromText, toKey, type Key } from './key.js';
import { BATCH_KEYS, type KeySourceOptions, type RawKeySource } from './source.js';

/**
 * The drivers load when a source first reads: imported with this module they cost every node's
 * start ~90 ms (mysql2 ~60, pg ~30), and most nodes never read a SQL source.
 */
let pg: typeof PgDriver | undefined;
async function loadPg(): Promise<typeof PgDriver> {
  return (pg ??= (await import('pg')).default);
}
async function loadMysql(): Promise<typeof import('mysql2')> {
  return (await import('mysql2')).default;
}

export interface SqlSourceOptions extends KeySourceOptions {
  readonly timeoutMs: number;
  /** Rows per FETCH from PostgreSQL's cursor. @defaultValue 10,000 */
  readonly batchRows?: number;
}

interface Connection {
  readonly host: string;
  readonly port: number | undefined;
  readonly user: string | undefined;
  readonly database: string | undefined;
  readonly password: string | undefined;
}

/** The URL as shown in messages: it holds no password (refused), so it is shown as given. */
function describe(spec: SqlSourceSpec): string {
  return spec.url;
}

function fail(description: string, message: string, cause?: unknown): never {
  throw new InvalidRequestError(`key source ${description}: ${message}`, { cause, details: { source: description } });
}

function connectionOf(spec: SqlSourceSpec, env: KeySourceOptions['env'], description: string): Connection {
  const problem = databaseUrlProblem(spec.url);
  if (problem !== undefined) fail(description, `url ${problem}`);
  const url = new URL(spec.url);
  let password: string | undefined;
  if (spec.password_env !== undefined) {
    password = env[spec.password_env];
    if (password === undefined) fail(description, `the environment variable ${spec.password_env} (password_env) is not set on this node`);
  }
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''));
  return {
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port === '' ? undefined : Number(url.port),
    user: url.username === '' ? undefined : decodeURIComponent(url.username),
    database: database === '' ? undefined : database,
    password,
  };
}

/** A query as the body of a cursor or a stream: one statement, without a trailing semicolon. */
function statementOf(sql: string): string {
  return sql.trim().replace(/;\s*$/, '');
}

export function createSqlSource(spec: SqlSourceSpec, options: SqlSourceOptions): RawKeySource {
  const description = describe(spec);
  const driver = DatabaseSchemes[new URL(spec.url).protocol as keyof typeof DatabaseSchemes];
  return {
    description,
    batches: () => (driver === 'pg' ? postgresKeys(spec, options, description) : mysqlKeys(spec, options, description)),
  };
}

// PostgreSQL type oids whose default parsing would lose or reinterpret a key value.
const PG_BOOL = 16;
const PG_INT8 = 20;
const PG_INT2 = 21;
const PG_INT4 = 23;
const PG_DATE = 1082;
const PG_TIMESTAMP = 1114;
const PG_TIMESTAMPTZ = 1184;
const PG_NUMERIC = 1700;

/** How the PostgreSQL source parses each column type's text (exported for the tests' comparison of row modes). */
export const postgresKeyTypes = {
  getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
    switch (oid) {
      case PG_BOOL:
        return (v) => (v === 't' ? 1 : 0);
      case PG_INT2:
      case PG_INT4:
        return Number; // always a safe integer; a little cheaper than pg's parseInt per value
      case PG_INT8:
        return integerFromText;
      case PG_NUMERIC:
        return decimalFromText;
      case PG_DATE:
        return (v) => v; // YYYY-MM-DD; pg would make it a Date at local midnight
      case PG_TIMESTAMP:
      case PG_TIMESTAMPTZ:
        return timestampFromText; // zone-less text is UTC; pg would read it as local time
      default:
        // Asked only by a client of the loaded driver (postgresKeys loads it first).
        return pg!.types.getTypeParser(oid, format ?? 'text') as (value: string) => unknown;
    }
  },
};

async function* postgresKeys(spec: SqlSourceSpec, options: SqlSourceOptions, description: string): AsyncGenerator<readonly Key[]> {
  const conn = connectionOf(spec, options.env, description);
  const { Client } = await loadPg();
  const client = new Client({
    host: conn.host,
    ...(conn.port === undefined ? {} : { port: conn.port }),
    ...(conn.user === undefined ? {} : { user: conn.user }),
    ...(conn.database === undefined ? {} : { database: conn.database }),
    ...(conn.password === undefined ? {} : { password: conn.password }),
    connectionTimeoutMillis: JobSetDefaults.connectTimeoutMs,
    statement_timeout: options.timeoutMs,
    // timestamptz is printed in the session's zone; UTC keeps the text simple (key.ts reads any offset).
    options: '-c TimeZone=UTC',
    types: postgresKeyTypes,
    application_name: 'docket key source',
  });
  // A connection that drops after connecting emits 'error' on the client; without a listener it
  // would crash the node. The failing query rejects with it too, and that is what we report.
  client.on('error', () => undefined);
  const batch = options.batchRows ?? 10_000;
  let step = 'connecting';
  try {
    await client.connect();
    step = 'running the query';
    await client.query('BEGIN READ ONLY');
    await client.query(`DECLARE docket_keys NO SCROLL CURSOR FOR ${statementOf(spec.sql)}`);
    const fetchNext = () => {
      // Rows as arrays: pg builds no object per row, and the columns are matched to the key's
      // attributes once (ColumnKeys) rather than per row.
      const fetching = client.query<unknown[]>({ text: `FETCH ${batch} FROM docket_keys`, rowMode: 'array' });
      // Awaited below, unless the reader stops first (then the client's end rejects it).
      fetching.catch(() => undefined);
      return fetching;
    };
    let row = 0;
    let columns: ColumnKeys | undefined;
    let fetching = fetchNext();
    for (;;) {
      const result = await fetching;
      const more = result.rows.length === batch;
      // The server fills the next batch while this one becomes keys and the reader takes it.
      if (more) fetching = fetchNext();
      if (result.rows.length > 0) {
        columns ??= new ColumnKeys(result.fields.map((f) => f.name), description, row + 1, { attributes: options.attributes });
        const keys = new Array<Key>(result.rows.length);
        for (let i = 0; i < keys.length; i++) keys[i] = columns.keyOf(result.rows[i]!, row + i + 1);
        row += keys.length;
        yield keys;
      }
      if (!more) break;
    }
    await client.query('COMMIT');
  } catch (err) {
    if (err instanceof InvalidRequestError) throw err;
    fail(description, `${step}: ${(err as Error).message}`, err);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * mysql2's typeCast: integers and DECIMAL as text (it would round a BIGINT past 2^53 or give a
 * DECIMAL as a string), dates as text (it would build Dates in the node's zone).
 */
function mysqlTypeCast(field: TypeCastField, next: TypeCastNext): unknown {
  switch (field.type) {
    case 'LONGLONG':
    case 'LONG':
    case 'INT24':
    case 'SHORT':
    case 'TINY':
    case 'YEAR': {
      const text = field.string();
      return text === null ? null : integerFromText(text);
    }
    case 'NEWDECIMAL':
    case 'DECIMAL': {
      const text = field.string();
      return text === null ? null : decimalFromText(text);
    }
    case 'DATE':
      return field.string(); // YYYY-MM-DD
    case 'DATETIME':
    case 'TIMESTAMP': {
      // TIMESTAMP prints in the session's zone, which is UTC (set below); DATETIME has no zone: read as UTC.
      const text = field.string();
      return text === null ? null : timestampFromText(text);
    }
    default:
      return next();
  }
}

async function* mysqlKeys(spec: SqlSourceSpec, options: SqlSourceOptions, description: string): AsyncGenerator<readonly Key[]> {
  const conn = connectionOf(spec, options.env, description);
  const mysql = await loadMysql();
  const connection = mysql.createConnection({
    host: conn.host,
    ...(conn.port === undefined ? {} : { port: conn.port }),
    ...(conn.user === undefined ? {} : { user: conn.user }),
    ...(conn.database === undefined ? {} : { database: conn.database }),
    ...(conn.password === undefined ? {} : { password: conn.password }),
    connectTimeout: JobSetDefaults.connectTimeoutMs,
    typeCast: mysqlTypeCast,
    supportBigNumbers: true,
    bigNumberStrings: true,
  });
  connection.on('error', () => undefined);
  const run = (sql: string) =>
    new Promise<void>((resolve, reject) => {
      connection.query(sql, (err: Error | null) => (err ? reject(err) : resolve()));
    });
  let step = 'connecting';
  let done = false;
  try {
    await new Promise<void>((resolve, reject) => connection.connect((err: Error | null) => (err ? reject(err) : resolve())));
    step = 'running the query';
    await run("SET time_zone = '+00:00'");
    await run('START TRANSACTION READ ONLY');
    const stream = connection.query({ sql: statementOf(spec.sql), timeout: options.timeoutMs }).stream({ highWaterMark: 1_000 });
    let row = 0;
    let batch: Key[] = [];
    for await (const r of stream as AsyncIterable<Record<string, unknown> | FieldPacket>) {
      row += 1;
      batch.push(toKey(r, `${description} row ${row}`, { attributes: options.attributes }));
      if (batch.length >= BATCH_KEYS) {
        yield batch;
        batch = [];
      }
    }
    if (batch.length > 0) yield batch;
    await run('COMMIT');
    done = true;
  } catch (err) {
    if (err instanceof InvalidRequestError) throw err;
    fail(description, `${step}: ${(err as Error).message}`, err);
  } finally {
    // An abandoned stream leaves rows on the wire: destroy rather than wait for a clean end.
    if (done) await new Promise<void>((resolve) => connection.end(() => resolve()));
    else connection.destroy();
  }
}
