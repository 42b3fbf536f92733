/**
 * The loader of `replay --job` and `explain` for a job whose body a node evicted from memory
 * (issue 12): the node still knows its events' positions (the compact entry), so its commits are
 * read by stream sequence, a handful of reads instead of a scan of the whole log. The rest of its
 * retry chain is then read the same way (a node's `not_found` is an answer: it folds every
 * partition and keeps evicted jobs' ids). Any other job is read by the scanning loader as before,
 * which also shows events a node refused (positions only name what a node accepted; `docket
 * audit` reports the refused ones); so is everything when no node answers.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { toExpectedSeq } from '../audit/packed.js';
import type { JobLoader } from '../audit/replay.js';
import type { RecordedMessage } from '../audit/types.js';
import { EXPECTED_HEADER, MSG_ID_HEADER, STREAM, subjects } from '../nats/subjects.js';

/** A commit holding a fan-out job's submit (its job.submitted carries fan_out). */
const FAN_OUT_NEEDLE = Buffer.from('"fan_out"');

/** How long a node gets to answer `get` before the scan is used instead. */
const GET_TIMEOUT_MS = 2_000;

interface GetReply {
  readonly ok?: boolean;
  readonly error?: { readonly code?: string };
  readonly evicted?: boolean;
  readonly history?: readonly { readonly seq: number }[];
  readonly truncated?: boolean;
}

type NodeAnswer = { readonly known: false } | { readonly known: true; readonly evicted: boolean; readonly seqs: number[] | null };

/** What a node says of a job: unknown, or its commits' sequences (null when its history was cut to fit); null when no node answers. */
async function askNode(nc: NatsConnection, jobId: string): Promise<NodeAnswer | null> {
  try {
    const reply = (await nc.request(subjects.command('get'), JSON.stringify({ job_id: jobId }), { timeout: GET_TIMEOUT_MS })).json<GetReply>();
    if (reply.ok === false) return reply.error?.code === 'not_found' ? { known: false } : null;
    const seqs = reply.truncated || !reply.history ? null : [...new Set(reply.history.map((h) => h.seq))].sort((a, b) => a - b);
    return { known: true, evicted: reply.evicted === true, seqs };
  } catch {
    return null;
  }
}

async function readCommit(jsm: JetStreamManager, seq: number): Promise<RecordedMessage | null> {
  const m = await jsm.streams.getMessage(STREAM, { seq });
  if (!m) return null;
  return {
    seq: m.seq,
    subject: m.subject,
    time: m.time.getTime(),
    msgId: m.header?.get(MSG_ID_HEADER) || null,
    expectedLastSubjectSeq: toExpectedSeq(m.header ? m.header.get(EXPECTED_HEADER) : null),
    data: m.data,
  };
}

/** Reads an evicted job's chain by the positions a node gives; `scan` answers everything else. */
export function positionalJobLoader(nc: NatsConnection, scan: JobLoader): JobLoader {
  let jsm: Promise<JetStreamManager> | undefined;
  /** Set by the first job asked: whether its chain is read by position. */
  let byPosition: boolean | undefined;
  return async (jobId) => {
    if (byPosition === false) return scan(jobId);
    const answer = await askNode(nc, jobId);
    if (byPosition === undefined) byPosition = answer !== null && answer.known && answer.evicted && answer.seqs !== null;
    if (!byPosition) return scan(jobId);
    if (answer === null || (answer.known && answer.seqs === null)) return scan(jobId);
    if (!answer.known) return [];
    jsm ??= jetstreamManager(nc);
    const manager = await jsm;
    const commits = await Promise.all(answer.seqs!.map((seq) => readCommit(manager, seq)));
    // A commit the stream no longer holds (limits): the scan says what is left.
    if (commits.some((c) => c === null)) return scan(jobId);
    // A fan-out job's node events are in commits its positions do not name: the scan finds them.
    if (commits.some((c) => Buffer.from(c!.data.buffer, c!.data.byteOffset, c!.data.byteLength).includes(FAN_OUT_NEEDLE))) return scan(jobId);
    return commits as RecordedMessage[];
  };
}
