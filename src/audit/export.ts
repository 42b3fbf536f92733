/**
 * `export --format jsonl`: one stored event per line, for external tools. Field order is stable:
 * `seq, index, subject, stored_at, msg_id, expected_last_subject_seq, commit, writer, prev_hash,
 * commit_hash`, then `event` with the envelope's fields in DESIGN's order (`id, type, time,
 * aggregate, queue, data, meta`) and the keys inside them sorted. `commit_hash` is the SHA-256 of
 * the stored commit, so a tool can check the chain from the lines alone: each commit's
 * `prev_hash` is the `commit_hash` of the previous commit of its partition. A commit that cannot
 * be read is one line with `index: null`, its payload as `raw` text and the reason; an event
 * that is not an object is exported as `raw` JSON with the reason.
 */
import { canonicalJson } from '../ids.js';
import { commitHash, decodeCommit } from '../nats/codec.js';
import type { RecordedMessage } from './types.js';

const ENVELOPE_KEYS = ['id', 'type', 'time', 'aggregate', 'queue', 'data', 'meta'] as const;

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

/** The JSONL lines (without newlines) for one stored commit: one per event. */
export function toExportLines(m: RecordedMessage): string[] {
  const stored =
    `"subject":${JSON.stringify(m.subject)},"stored_at":${JSON.stringify(new Date(m.time).toISOString())}` +
    `,"msg_id":${JSON.stringify(m.msgId)},"expected_last_subject_seq":${m.expectedLastSubjectSeq === null ? 'null' : m.expectedLastSubjectSeq}`;
  const hash = commitHash(m.data);
  let commit;
  try {
    commit = decodeCommit(m.data);
  } catch (err) {
    const problem = err instanceof Error ? err.message : String(err);
    return [`{"seq":${m.seq},"index":null,${stored},"commit":null,"writer":null,"prev_hash":null,"commit_hash":"${hash}","event":null,"raw":${JSON.stringify(text(m.data))},"problem":${JSON.stringify(problem)}}`];
  }
  const head =
    `,${stored},"commit":${JSON.stringify(commit.commit)},"writer":${canonicalJson(commit.writer)}` +
    `,"prev_hash":${JSON.stringify(commit.prev_hash)},"commit_hash":"${hash}"`;
  const events = commit.events as readonly unknown[];
  return events.map((value, index) => {
    const at = `{"seq":${m.seq},"index":${index}${head}`;
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return `${at},"event":null,"raw":${JSON.stringify(JSON.stringify(value) ?? null)},"problem":"event is not an object"}`;
    return `${at},"event":${envelopeJson(value as Record<string, unknown>)}}`;
  });
}

/** Whether a commit's subject is `queue`'s partition (export --queue reads with a filter; this is for in-memory use). */
export function inQueue(subject: string, queue: string): boolean {
  return subject === `docket.log.q.${queue}`;
}
