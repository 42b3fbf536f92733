/**
 * How the CLI prints: tables for people (cli-table3), one JSON document (or JSON lines) for
 * scripts, and errors as `error <code>: <message>` on stderr or `{ok:false,error}` on stdout.
 */
import Table from 'cli-table3';

export type Cell = string | number | boolean | null | undefined;

export function writeOut(text: string): void {
  process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
}

export function writeErr(text: string): void {
  process.stderr.write(text.endsWith('\n') ? text : `${text}\n`);
}

/** One JSON document on one line: `--json` output, or one line of JSONL. */
export function writeJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** A cell's text: '-' for nothing, JSON for objects, the value otherwise. */
export function cellText(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function style(): { head: string[]; border: string[] } {
  return process.stdout.isTTY ? { head: ['cyan'], border: ['grey'] } : { head: [], border: [] };
}

/** No rule between rows: a list reads as a list. */
const COMPACT = { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' };

export function table(head: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const t = new Table({ head: [...head], style: style(), chars: COMPACT });
  for (const row of rows) t.push(row.map(cellText));
  return t.toString();
}

/** A two-column field/value table, for one record. */
export function recordTable(entries: readonly (readonly [string, unknown])[]): string {
  const t = new Table({ style: style(), chars: COMPACT });
  for (const [field, value] of entries) t.push({ [field]: cellText(value) });
  return t.toString();
}

export interface ErrorOutput {
  readonly code: string;
  readonly message: string;
  readonly details?: Record<string, unknown>;
}

export function writeError(error: ErrorOutput, json: boolean): void {
  if (json) writeJson({ ok: false, error });
  else writeErr(`error ${error.code}: ${error.message}`);
}
