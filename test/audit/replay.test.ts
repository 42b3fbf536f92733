import { describe, expect, test } from 'vitest';
import {
  diffQueueViews,
  Explainer,
  jobTimeline,
  queueAt,
  QueueReplay,
  replayJob,
  toExportLines,
  type RecordedMessage,
} from '../../src/audit/index.js';
import { positionOf } from '../../machines/index.js';
import { commitHash } from '../../src/nats/codec.js';
import { retryJobId } from '../../src/ids.js';
import { History, T0, toRecorded } from '../support/audit-log.js';

/** Every commit: the timeline takes the job's own events from them (as the CLI's loader hands a partition's commits). */
function loaderOf(messages: readonly RecordedMessage[]) {
  return async (jobId: string) => messages.filter((m) => Buffer.from(m.data).includes(jobId));
}

describe('a job timeline', () => {
  test('every event with its seq, time and the states before and after; the run; refusals kept but not folded', () => {
    const h = new History('tl');
    h.submit('q', 'j1');
    h.claim('j1', { runId: 'r1', worker: 'w9' });
    h.succeed('j1', { runId: 'intruder' });
    h.advance(4000);
    h.succeed('j1');
    h.submit('q', 'neighbour'); // another job of the partition: not in the timeline
    const messages = toRecorded(h.entries);
    const t = jobTimeline(messages, 'j1')!;
    expect(t.job_id).toBe('j1');
    expect(t.queue).toBe('q');
    expect(t.subject).toBe('docket.log.q.q');
    expect(t.status).toBe('succeeded');
    expect(t.submit_seq).toBe(1);
    expect(t.submit_index).toBe(0);
    expect(t.events.map((e) => [e.seq, e.index, e.type, e.before.job, e.after.job, e.accepted])).toEqual([
      [1, 0, 'job.submitted', 'new', 'queued', true],
      [2, 0, 'job.claimed', 'queued', 'running', true],
      [3, 0, 'job.succeeded', 'running', 'running', false],
      [4, 0, 'job.succeeded', 'running', 'succeeded', true],
    ]);
    expect(t.events[1]!.after.run).toBe('running');
    expect(t.events[0]!.stored_at).toBe(new Date(T0).toISOString());
    expect(t.run).toMatchObject({ run_id: 'r1', worker: 'w9', host: 'host-a', pid: 4242, version: '1.0.0', lease_ms: 30_000, status: 'completed', duration_ms: 6000 });
  });

  test('events inside commits of many are placed by (seq, index); undecodable events of the job are shown', () => {
    const h = new History('tl2');
    h.submit('q', 'other');
    h.together(() => {
      h.submit('q', 'j1');
      h.claim('other');
      h.claim('j1');
      h.raw('q.q', { id: 'bad', type: 'job.succeeded', time: new Date(T0).toISOString(), aggregate: { kind: 'job', id: 'j1' }, queue: 'q', data: {}, meta: { node: 'n' } });
    });
    h.succeed('j1');
    const t = jobTimeline(toRecorded(h.entries), 'j1')!;
    expect(t.events.map((e) => [e.seq, e.index, e.type, e.accepted])).toEqual([
      [2, 0, 'job.submitted', true],
      [2, 2, 'job.claimed', true],
      [2, 3, 'undecodable', false],
      [3, 0, 'job.succeeded', true],
    ]);
    expect(t.events[2]!.problem).toContain('data.run_id');
    expect(t.status).toBe('succeeded');
  });

  test('no events of the job: null', () => {
    expect(jobTimeline([], 'j1')).toBeNull();
    const h = new History('tl3');
    h.submit('q', 'j2');
    expect(jobTimeline(toRecorded(h.entries), 'j1')).toBeNull();
  });
});

describe('the retry chain, both ways', () => {
  const h = new History('ch');
  const ids = h.retrying('q', 'first', 3, 4); // fails three times, attempt 4 succeeds
  h.succeeding('q', 'unrelated');
  const messages = toRecorded(h.entries);

  test('from the middle of the chain', async () => {
    expect(ids[1]).toBe(retryJobId('first', 1));
    const replay = (await replayJob(ids[1]!, loaderOf(messages), retryJobId))!;
    expect(replay.chain.map((l) => [l.job_id, l.attempt, l.status])).toEqual([
      ['first', 1, 'failed'],
      [ids[1], 2, 'failed'],
      [ids[2], 3, 'failed'],
      [ids[3], 4, 'succeeded'],
    ]);
    expect(replay.retry_of).toBe('first');
    expect(replay.retried_by).toBe(ids[2]);
    expect(replay.chain[0]!.error).toBe('boom');
    expect(replay.chain[0]!.failure_reason).toBe('error');
  });

  test('from either end', async () => {
    const fromFirst = (await replayJob('first', loaderOf(messages), retryJobId))!;
    const fromLast = (await replayJob(ids[3]!, loaderOf(messages), retryJobId))!;
    expect(fromFirst.chain).toEqual(fromLast.chain);
    expect(fromFirst.retry_of).toBeNull();
    expect(fromLast.retried_by).toBeNull();
  });

  test('an unknown job: null', async () => {
    expect(await replayJob('nope', loaderOf(messages), retryJobId)).toBeNull();
  });
});

describe('a queue at a point', () => {
  const h = new History('qa');
  h.submit('q', 'low', { priority: 9 });
  h.submit('q', 'high', { priority: 1 });
  h.submit('q', 'mid-a');
  h.submit('q', 'mid-b');
  h.submit('q', 'later', { delayMs: 3_600_000 });
  h.submit('other', 'x');
  h.claim('mid-a', { worker: 'w7' }); // seq 7
  h.move('mid-b', 0, null); // seq 8: now ahead of high
  h.succeed('mid-a'); // seq 9
  h.submit('q', 'gone');
  h.cancel('gone'); // seq 11
  const messages = toRecorded(h.entries);
  const timeOf = (seq: number) => Date.parse((JSON.parse(new TextDecoder().decode(messages[seq - 1]!.data)) as { events: { time: string }[] }).events[0]!.time);

  test('ready order by (priority, position, seq), delayed by run_at, running runs, progress', () => {
    const at7 = queueAt('q', messages.slice(0, 7), timeOf(7));
    expect(at7.seq).toBe(7);
    expect(at7.ready.map((r) => r.job_id)).toEqual(['high', 'mid-b', 'low']);
    expect(at7.ready[0]).toMatchObject({ priority: 1, position: positionOf(2, 0), seq: 2, index: 0, attempt: 1 });
    expect(at7.delayed.map((d) => d.job_id)).toEqual(['later']);
    expect(at7.running).toEqual([expect.objectContaining({ job_id: 'mid-a', worker: 'w7', host: 'host-a', lease_ms: 30_000 })]);
    expect(at7.progress.counts).toMatchObject({ queued: 4, running: 1 });
    expect(at7.progress.total).toBe(5);

    const at11 = queueAt('q', messages, timeOf(11));
    expect(at11.ready.map((r) => r.job_id)).toEqual(['mid-b', 'high', 'low']);
    expect(at11.running).toEqual([]);
    expect(at11.progress.counts).toMatchObject({ queued: 4, succeeded: 1, cancelled: 1 });
  });

  test('the clock decides which delayed jobs have come', () => {
    const late = queueAt('q', messages, timeOf(11) + 3_600_000);
    expect(late.delayed).toEqual([]);
    expect(late.ready.map((r) => r.job_id)).toContain('later');
  });

  test('the diff of two points', () => {
    const a = queueAt('q', messages.slice(0, 7), timeOf(7));
    const b = queueAt('q', messages, timeOf(11));
    const d = diffQueueViews(a, b);
    expect(d.from).toMatchObject({ seq: 7, index: null });
    expect(d.to).toMatchObject({ seq: 11, index: null });
    expect(d.ready.added).toEqual([]);
    expect(d.ready.removed).toEqual([]);
    expect(d.ready.moved).toEqual([
      { job_id: 'mid-b', from: 1, to: 0 },
      { job_id: 'high', from: 0, to: 1 },
    ]);
    expect(d.running).toEqual({ started: [], ended: ['mid-a'] });
    expect(d.progress).toEqual({ running: -1, succeeded: 1, cancelled: 1 });
    const back = diffQueueViews(b, a);
    expect(back.running).toEqual({ started: ['mid-a'], ended: [] });
  });

  test('the same history in commits of many events folds to the same queue', () => {
    const packed = toRecorded(h.entries, 1, { eventsPerCommit: 3 });
    expect(packed.length).toBeLessThan(messages.length);
    const a = queueAt('q', messages, timeOf(11));
    const b = queueAt('q', packed, timeOf(11));
    expect(b.ready.map((r) => r.job_id)).toEqual(a.ready.map((r) => r.job_id));
    expect(b.delayed).toEqual(a.delayed);
    expect(b.running).toEqual(a.running);
    expect(b.progress).toEqual(a.progress);
    expect(b.seq).toBe(packed[packed.length - 1]!.seq);
  });

  test('a point inside a commit: events folded one by one', () => {
    const g = new History('qp');
    g.together(() => {
      g.submit('q', 'x1');
      g.submit('q', 'x2');
      g.claim('x1');
    });
    const [commit] = toRecorded(g.entries);
    const replay = new QueueReplay('q', T0 + 1e9);
    const events = JSON.parse(Buffer.from(commit!.data).toString('utf8')).events as unknown[];
    expect(events).toHaveLength(3);
    replay.push({ ...commit!, data: Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(commit!.data).toString('utf8')), events: events.slice(0, 2) })) });
    expect(replay.view().ready.map((r) => r.job_id)).toEqual(['x1', 'x2']);
    const full = queueAt('q', [commit!], T0 + 1e9);
    expect(full.ready.map((r) => r.job_id)).toEqual(['x2']);
    expect(full.running.map((r) => r.job_id)).toEqual(['x1']);
  });

  test('one fold viewed at every prefix equals a fresh fold of that prefix', () => {
    const replay = new QueueReplay('q', 0);
    for (const m of messages) {
      replay.push(m);
      replay.atMs = timeOf(m.seq);
      expect(replay.view()).toEqual(queueAt('q', messages.slice(0, m.seq), timeOf(m.seq)));
    }
  });
});

describe('explain', () => {
  test('the order key at the claim, who stood ahead and what became of them, delays, the winning claim', async () => {
    const h = new History('ex');
    h.submit('q', 'a', { priority: 1 });
    h.submit('q', 'b', { priority: 2, delayMs: 5000 });
    h.submit('q', 'c', { priority: 3 });
    h.advance(10_000);
    // 'b' is claimed while 'a' (ahead of it) is still queued: a's claim lands after b's.
    h.claim('b', { worker: 'wb' }); // seq 4
    h.claim('a', { worker: 'wa' }); // seq 5
    h.claim('c'); // seq 6
    const messages = toRecorded(h.entries);
    const job = (await replayJob('b', loaderOf(messages), retryJobId))!;
    const explainer = new Explainer(job, T0 + 1e9);
    for (const m of messages) explainer.push(m);
    expect(explainer.done).toBe(true);
    const e = explainer.explanation();
    expect(e.claim).toMatchObject({ seq: 4, index: 0, worker: 'wb', run_id: 'b-run1' });
    expect(e.order_key).toEqual({ priority: 2, position: positionOf(2, 0), seq: 2, index: 0 });
    expect(e.place).toBe(1);
    expect(e.ready_count).toBe(3);
    expect(e.ahead).toEqual([{ job_id: 'a', priority: 1, position: positionOf(1, 0), seq: 1, index: 0, fate: 'claimed', fate_seq: 5, fate_index: 0, fate_worker: 'wa' }]);
    expect(e.delays.requested_delay_ms).toBe(5000);
    expect(e.delays.waited_ms).toBe(Date.parse(e.claim!.time) - Date.parse(e.delays.ready_at));
    expect(e.retries.map((l) => l.job_id)).toEqual(['b']);
  });

  test('claims in one commit: the claim that won and the fates named by index', async () => {
    const h = new History('ex3');
    h.submit('q', 'a', { priority: 1 });
    h.submit('q', 'b', { priority: 2 });
    h.together(() => {
      h.claim('b', { worker: 'wb' });
      h.claim('a', { worker: 'wa' });
    });
    const messages = toRecorded(h.entries);
    const job = (await replayJob('b', loaderOf(messages), retryJobId))!;
    const explainer = new Explainer(job, T0 + 1e9);
    for (const m of messages) explainer.push(m);
    expect(explainer.done).toBe(true);
    const e = explainer.explanation();
    expect(e.claim).toMatchObject({ seq: 3, index: 0, worker: 'wb' });
    expect(e.ahead).toEqual([expect.objectContaining({ job_id: 'a', fate: 'claimed', fate_seq: 3, fate_index: 1, fate_worker: 'wa' })]);
  });

  test('a job never claimed: its place now', async () => {
    const h = new History('ex2');
    h.submit('q', 'a');
    h.submit('q', 'b');
    const messages = toRecorded(h.entries);
    const job = (await replayJob('b', loaderOf(messages), retryJobId))!;
    const explainer = new Explainer(job, T0 + 1e9);
    for (const m of messages) explainer.push(m);
    const e = explainer.explanation();
    expect(e.claim).toBeNull();
    expect(e.place).toBe(1);
    expect(e.ahead.map((a) => a.job_id)).toEqual(['a']);
    expect(e.notes[0]).toContain('never claimed');
  });
});

describe('export', () => {
  test('one line per event, stable field order: commit fields, then the envelope in DESIGN order with sorted keys', () => {
    const event = { meta: { node: 'n', actor: 'me' }, data: { z: 1, a: { y: 2, b: 3 } }, queue: 'q', aggregate: { id: 'j1', kind: 'job' }, type: 'job.moved', time: 't', id: 'e1', extra: true };
    const payload = { v: 2, commit: 'c-1', partition: 'q.q', writer: { node: 'n', epoch: 3 }, prev_hash: null, events: [event, 42] };
    const data = new TextEncoder().encode(JSON.stringify(payload));
    const m: RecordedMessage = { seq: 7, subject: 'docket.log.q.q', time: T0, msgId: 'c-1', expectedLastSubjectSeq: 3, data };
    const lines = toExportLines(m);
    expect(lines).toHaveLength(2);
    const head = `"subject":"docket.log.q.q","stored_at":"2030-01-01T00:00:00.000Z","msg_id":"c-1","expected_last_subject_seq":3,"commit":"c-1","writer":{"epoch":3,"node":"n"},"prev_hash":null,"commit_hash":"${commitHash(data)}"`;
    expect(lines[0]).toBe(
      `{"seq":7,"index":0,${head},` +
        '"event":{"id":"e1","type":"job.moved","time":"t","aggregate":{"id":"j1","kind":"job"},"queue":"q","data":{"a":{"b":3,"y":2},"z":1},"meta":{"actor":"me","node":"n"},"extra":true}}',
    );
    expect(JSON.parse(lines[1]!)).toMatchObject({ seq: 7, index: 1, event: null, raw: '42', problem: 'event is not an object' });
    const bad = toExportLines({ ...m, data: new TextEncoder().encode('oops'), msgId: null, expectedLastSubjectSeq: null });
    expect(bad.map((l) => JSON.parse(l))).toEqual([
      {
        seq: 7,
        index: null,
        subject: 'docket.log.q.q',
        stored_at: '2030-01-01T00:00:00.000Z',
        msg_id: null,
        expected_last_subject_seq: null,
        commit: null,
        writer: null,
        prev_hash: null,
        commit_hash: commitHash(new TextEncoder().encode('oops')),
        event: null,
        raw: 'oops',
        problem: 'commit is not JSON',
      },
    ]);
  });

  test("the lines alone carry the chain: each commit's prev_hash is the previous commit_hash of its partition", () => {
    const h = new History('exp');
    h.succeeding('q', 'j1');
    h.submit('r', 'k1');
    h.submit('q', 'j2');
    const lines = toRecorded(h.entries).flatMap(toExportLines).map((l) => JSON.parse(l) as { subject: string; prev_hash: string | null; commit_hash: string });
    const last = new Map<string, string | null>();
    for (const line of lines) {
      expect(line.prev_hash).toBe(last.get(line.subject) ?? null);
      last.set(line.subject, line.commit_hash);
    }
  });
});
