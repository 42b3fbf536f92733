import { describe, expect, test } from 'vitest';
import {
  diffQueueViews,
  Explainer,
  jobTimeline,
  queueAt,
  QueueReplay,
  replayJob,
  toExportLine,
  type RecordedMessage,
} from '../../src/audit/index.js';
import { retryJobId } from '../../src/ids.js';
import { History, T0, toRecorded } from '../support/audit-log.js';

function loaderOf(messages: readonly RecordedMessage[]) {
  return async (jobId: string) => messages.filter((m) => m.subject.endsWith(`.${jobId}`));
}

describe('a job timeline', () => {
  test('every event with its seq, time and the states before and after; the run; refusals kept but not folded', () => {
    const h = new History('tl');
    h.submit('q', 'j1');
    h.claim('j1', { runId: 'r1', worker: 'w9' });
    h.succeed('j1', { runId: 'intruder' });
    h.advance(4000);
    h.succeed('j1');
    const messages = toRecorded(h.entries);
    const t = jobTimeline(messages)!;
    expect(t.job_id).toBe('j1');
    expect(t.queue).toBe('q');
    expect(t.status).toBe('succeeded');
    expect(t.submit_seq).toBe(1);
    expect(t.events.map((e) => [e.seq, e.type, e.before.job, e.after.job, e.accepted])).toEqual([
      [1, 'job.submitted', 'new', 'queued', true],
      [2, 'job.claimed', 'queued', 'running', true],
      [3, 'job.succeeded', 'running', 'running', false],
      [4, 'job.succeeded', 'running', 'succeeded', true],
    ]);
    expect(t.events[1]!.after.run).toBe('running');
    expect(t.events[0]!.stored_at).toBe(new Date(T0).toISOString());
    expect(t.run).toMatchObject({ run_id: 'r1', worker: 'w9', host: 'host-a', pid: 4242, version: '1.0.0', lease_ms: 30_000, status: 'completed', duration_ms: 6000 });
  });

  test('no job events: null', () => {
    expect(jobTimeline([])).toBeNull();
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
  const timeOf = (seq: number) => Date.parse((JSON.parse(new TextDecoder().decode(messages[seq - 1]!.data)) as { time: string }).time);

  test('ready order by (priority, position, seq), delayed by run_at, running runs, progress', () => {
    const at7 = queueAt('q', messages.slice(0, 7), timeOf(7));
    expect(at7.seq).toBe(7);
    expect(at7.ready.map((r) => r.job_id)).toEqual(['high', 'mid-b', 'low']);
    expect(at7.ready[0]).toMatchObject({ priority: 1, seq: 2, attempt: 1 });
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
    expect(d.from.seq).toBe(7);
    expect(d.to.seq).toBe(11);
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
    expect(e.claim).toMatchObject({ seq: 4, worker: 'wb', run_id: 'b-run1' });
    expect(e.order_key).toEqual({ priority: 2, position: 2, seq: 2 });
    expect(e.place).toBe(1);
    expect(e.ready_count).toBe(3);
    expect(e.ahead).toEqual([{ job_id: 'a', priority: 1, position: 1, seq: 1, fate: 'claimed', fate_seq: 5, fate_worker: 'wa' }]);
    expect(e.delays.requested_delay_ms).toBe(5000);
    expect(e.delays.waited_ms).toBe(Date.parse(e.claim!.time) - Date.parse(e.delays.ready_at));
    expect(e.retries.map((l) => l.job_id)).toEqual(['b']);
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
  test('stable field order: head fields, then the envelope in DESIGN order with sorted data keys', () => {
    const m: RecordedMessage = {
      seq: 7,
      subject: 'docket.evt.job.q.j1',
      time: T0,
      msgId: 'e1',
      expectedLastSubjectSeq: 3,
      data: new TextEncoder().encode(JSON.stringify({ meta: { node: 'n', actor: 'me' }, data: { z: 1, a: { y: 2, b: 3 } }, queue: 'q', type: 'job.moved', time: 't', id: 'e1', v: 1, extra: true })),
    };
    expect(toExportLine(m)).toBe(
      '{"seq":7,"subject":"docket.evt.job.q.j1","stored_at":"2030-01-01T00:00:00.000Z","msg_id":"e1","expected_last_subject_seq":3,' +
        '"event":{"v":1,"id":"e1","type":"job.moved","time":"t","queue":"q","data":{"a":{"b":3,"y":2},"z":1},"meta":{"actor":"me","node":"n"},"extra":true}}',
    );
    const line = JSON.parse(toExportLine({ ...m, data: new TextEncoder().encode('oops'), msgId: null, expectedLastSubjectSeq: null }));
    expect(line).toEqual({ seq: 7, subject: 'docket.evt.job.q.j1', stored_at: '2030-01-01T00:00:00.000Z', msg_id: null, expected_last_subject_seq: null, event: null, raw: 'oops', problem: 'not JSON' });
  });
});
