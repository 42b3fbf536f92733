/**
 * `export --format jsonl`: one stored event per line, for external tools. Field order is stable:
 * `seq, subject, stored_at, msg_id, expected_last_subject_seq`, then `event` with the envelope's
 * fields in DESIGN's order (`v, id, type, time, queue, data, meta`) and the keys inside `data` and
 * `meta` sorted; a message that is not an envelope is exported as `raw` text with the reason.
 */
import { canonicalJson } from '../ids.js';
import type { RecordedMessage } from './types.js';

const ENVELOPE_KEYS = ['v', 'id', 'type', 'time', 'queue', 'data', 'meta'] as const;

function text(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

function envelopeJson(value: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const key of ENVELOPE_KEYS) {
    if (value[key] === undefined) continue;
    parts.push(`${JSON.stringify(key)}:${canonicalJson(value[key])}`);
  }
  // Fields a later envelope version may add, after the known ones, sorted.
  for (const key of Object.keys(value).sort()) {
    if ((ENVELOPE_KEYS as readonly string[]).includes(key) || value[key] === undefined) continue;
    parts.push(`${JSON.stringify(key)}:${canonicalJson(value[key])}`);
  }
  return `{${parts.join(',')}}`;
}

/** One JSONL line (without the newline) for a stored message. */
export function toExportLine(m: RecordedMessage): string {
  const head =
    `{"seq":${m.seq},"subject":${JSON.stringify(m.subject)},"stored_at":${JSON.stringify(new Date(m.time).toISOString())}` +
    `,"msg_id":${JSON.stringify(m.msgId)},"expected_last_subject_seq":${m.expectedLastSubjectSeq === null ? 'null' : m.expectedLastSubjectSeq}`;
  const body = text(m.data);
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return `${head},"event":null,"raw":${JSON.stringify(body)},"problem":"not JSON"}`;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return `${head},"event":null,"raw":${JSON.stringify(body)},"problem":"not a JSON object"}`;
  }
  return `${head},"event":${envelopeJson(value as Record<string, unknown>)}}`;
}

/** Whether a message's subject is in `queue` (export --queue reads with a filter; this is for in-memory use). */
export function inQueue(subject: string, queue: string): boolean {
  return subject.startsWith(`docket.evt.job.${queue}.`);
}
