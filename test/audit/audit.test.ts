import { describe, expect, test } from 'vitest';
import { auditMessages, AuditRules, type AuditReport, type AuditRule } from '../../src/audit/index.js';
import { retryJobId } from '../../src/ids.js';
import { History, toRecorded } from '../support/audit-log.js';

function audit(h: History): AuditReport {
  return auditMessages(toRecorded(h.entries));
}

function rules(report: AuditReport): AuditRule[] {
  return report.violations.map((v) => v.rule);
}

/** A busy legal history over two queues: successes, retries, cancels, moves, waiting jobs, artifacts. */
function legalHistory(): History {
  const h = new History('legal');
  h.succeeding('thumbs', 'a1');
  h.submit('thumbs', 'a2', { priority: 1 });
  h.submit('mail', 'm1', { delayMs: 60_000 });
  h.move('a2', 0, 5);
  h.claim('a2');
  h.submit('thumbs', 'a3', { waiting: true });
  h.event('a3', 'job.released', {});
  h.retrying('thumbs', 'b1', 2, 3); // fails twice, succeeds on attempt 3
  h.retrying('mail', 'b2', 3, 3); // fails three times: the chain ends failed
  h.claim('m1'); // moves the clock to its run_at
  h.artifact('m1');
  h.fail('m1', { reason: 'lease_expired' });
  h.retry('m1', { delayMs: 0 });
  h.succeed('a2');
  h.submit('mail', 'm2');
  h.cancel('m2');
  h.submit('mail', 'm3');
  h.claim('m3');
  h.cancel('m3'); // cancelling a running job fails its run
  h.submit('mail', 'm4');
  h.claim('m4');
  h.event('m4', 'job.skipped', { run_id: 'm4-run1', reason: 'nothing to do' });
  h.artifact('m4', 'after-close.txt'); // a closed run may still add artifacts
  h.submit('mail', 'm5');
  h.event('m5', 'job.ignored', { reason: null });
  h.submit('mail', 'm6');
  h.cancel('m6');
  h.retry('m6', { delayMs: 0 }); // `docket retry` by hand takes a cancelled job too
  return h;
}

describe('audit of a legal log', () => {
  test('is clean and counts what it read', () => {
    const h = legalHistory();
    const report = audit(h);
    expect(report.violations).toEqual([]);
    expect(report.ok).toBe(true);
    expect(report.messages).toBe(h.entries.length);
    expect(report.jobEvents).toBe(h.entries.length);
    // a1 a2 m1 a3 b1(+2 retries) b2(+2 retries) m1's retry m2 m3 m4 m5 m6(+1 retry)
    expect(report.jobs).toBe(17);
    expect(report.firstSeq).toBe(1);
    expect(report.lastSeq).toBe(h.entries.length);
  });

  test('events of other aggregates are checked for their sequence only', () => {
    const h = new History('other');
    h.succeeding('q', 'j1');
    const schedule = { v: 1 as const, id: 's-1', type: 'schedule.created', time: new Date().toISOString(), data: { cron: '* * * * *' }, meta: { node: 'n' } };
    h.raw('docket.evt.schedule.nightly', schedule);
    h.raw('docket.evt.schedule.nightly', { ...schedule, id: 's-2', type: 'schedule.fired' });
    const report = audit(h);
    expect(report.ok).toBe(true);
    expect(report.otherEvents).toBe(2);
  });
});

describe('each tampering is named with its rule and events', () => {
  test('job.succeeded for a job never claimed is an illegal transition naming the event', () => {
    const h = new History('t1');
    h.submit('q', 'j1');
    const forged = h.event('j1', 'job.succeeded', { run_id: 'made-up', result: null });
    const report = audit(h);
    expect(report.ok).toBe(false);
    expect(report.violations).toHaveLength(1);
    const v = report.violations[0]!;
    expect(v).toMatchObject({ seq: 2, rule: AuditRules.IllegalTransition, aggregate: 'job:j1', subject: 'docket.evt.job.q.j1', events: [2] });
    expect(v.message).toContain(forged.id);
    expect(v.message).toContain('never claimed');
  });

  test('an event for a job never submitted', () => {
    const h = new History('t2');
    h.submit('q', 'j1');
    h.raw('docket.evt.job.q.ghost', { ...(h.entries[0]!.event as object), id: 'x', type: 'job.claimed', data: { run_id: 'r', worker: 'w', host: 'h', pid: 1, version: '1', lease_ms: 1 } } as never);
    const report = audit(h);
    expect(rules(report)).toEqual([AuditRules.IllegalTransition]);
    expect(report.violations[0]!.message).toContain('never submitted');
  });

  test('a second claim while the run is open is two open runs', () => {
    const h = new History('t3');
    h.submit('q', 'j1');
    h.claim('j1', { runId: 'r1' });
    h.claim('j1', { runId: 'r2', worker: 'w2' });
    const report = audit(h);
    expect(rules(report)).toEqual([AuditRules.TwoOpenRuns]);
    expect(report.violations[0]!.events).toEqual([2, 3]);
  });

  test('a completion by a run that does not hold the job is a stale run', () => {
    const h = new History('t4');
    h.submit('q', 'j1');
    h.claim('j1', { runId: 'r1' });
    h.succeed('j1', { runId: 'r0' });
    h.succeed('j1', { runId: 'r1' });
    const report = audit(h);
    expect(rules(report)).toEqual([AuditRules.StaleRun]);
    expect(report.violations[0]).toMatchObject({ seq: 3, events: [2, 3] });
    expect(report.violations[0]!.message).toContain('r1 holds the job');
  });

  test('a run that closes twice is a double close', () => {
    const h = new History('t5');
    h.submit('q', 'j1');
    h.claim('j1');
    h.fail('j1');
    h.succeed('j1');
    const report = audit(h);
    expect(rules(report)).toEqual([AuditRules.DoubleClose]);
    expect(report.violations[0]!.events).toEqual([3, 4]);
  });

  test('a claim before run_at', () => {
    const h = new History('t6');
    h.submit('q', 'j1', { delayMs: 3_600_000 });
    h.claim('j1', { time: new Date(h.nowMs + 1000).toISOString() });
    const report = audit(h);
    expect(rules(report)).toEqual([AuditRules.ClaimedBeforeRunAt]);
    expect(report.violations[0]!.events).toEqual([1, 2]);
  });

  test('an unguarded append, and an event expecting a missing or later predecessor', () => {
    const h = new History('t7');
    h.submit('q', 'j1');
    h.claim('j1', {}, { expected: null });
    h.submit('q', 'j2');
    h.claim('j2', {}, { expected: 2 }); // j2's last event is seq 3: 2 is an earlier one (reorder)
    h.submit('q', 'j3');
    h.claim('j3', {}, { expected: 9 }); // nothing at 9 on j3's subject: a gap
    h.succeed('j3', {}, { msgId: null });
    const report = audit(h);
    expect(report.violations.map((v) => [v.seq, v.rule])).toEqual([
      [2, AuditRules.UnguardedAppend],
      [4, AuditRules.SequenceReorder],
      [6, AuditRules.SequenceGap],
      [7, AuditRules.UnguardedAppend],
    ]);
    expect(report.violations[3]!.message).toContain('Nats-Msg-Id');
  });

  test('retry chains: no such job, not failed, wrong attempt, beyond max_attempts, forks, cycles, stray attempts', () => {
    const h = new History('t8');
    h.submit('q', 'ok1', { maxAttempts: 2 });
    h.claim('ok1');
    h.fail('ok1');
    h.retry('ok1'); // legal: attempt 2 of 2
    h.retry('ok1', { id: 'fork' }); // a second retry of one failure
    h.submit('q', 'orphan', { retryOf: 'nope', attempt: 2 });
    h.submit('q', 'alive');
    h.submit('q', 'retry-of-alive', { retryOf: 'alive', attempt: 2 });
    h.submit('q', 'f1', { maxAttempts: 5 });
    h.claim('f1');
    h.fail('f1');
    h.retry('f1', { attempt: 4, id: 'skip' });
    h.submit('q', 'f2', { maxAttempts: 1 });
    h.claim('f2');
    h.fail('f2');
    h.retry('f2', { id: 'over' });
    h.submit('q', 'self', { retryOf: 'self', attempt: 2 });
    h.submit('q', 'stray', { attempt: 3 });
    h.submit('other', 'elsewhere', { retryOf: 'ok1', attempt: 2 });
    const report = audit(h);
    const byJob = report.violations.map((v) => [v.aggregate, v.rule]);
    expect(byJob).toEqual([
      ['job:fork', AuditRules.RetryChain],
      ['job:orphan', AuditRules.RetryChain],
      ['job:retry-of-alive', AuditRules.RetryChain],
      ['job:skip', AuditRules.RetryChain],
      ['job:over', AuditRules.RetryChain],
      ['job:self', AuditRules.RetryChain],
      ['job:stray', AuditRules.RetryChain],
      ['job:elsewhere', AuditRules.RetryChain],
    ]);
    const messages = report.violations.map((v) => v.message);
    expect(messages[0]).toContain(`already has retry ${retryJobId('ok1', 1)}`);
    expect(messages[1]).toContain('no earlier job');
    expect(messages[2]).toContain('queued, not failed or cancelled');
    expect(messages[3]).toContain('expected 2');
    expect(messages[4]).toContain('exceeds max_attempts 1');
    expect(messages[5]).toContain('cycle');
    expect(messages[6]).toContain('without retry_of');
    expect(messages[7]).toContain('no earlier job of queue other');
  });

  test('undecodable messages and envelopes that disagree with their subject', () => {
    const h = new History('t9');
    h.submit('q', 'j1');
    h.raw('docket.evt.job.q.j1', new TextEncoder().encode('{not json'), { msgId: 'raw-1' });
    h.raw('docket.evt.job.q', new TextEncoder().encode('{}'), { msgId: 'raw-2' });
    h.event('j1', 'job.claimed', { run_id: 'r1' } as never); // lacks worker and lease
    h.raw('docket.evt.job.q.j1', { v: 1, id: 'x1', type: 'job.exploded', time: new Date(T()).toISOString(), queue: 'q', data: {}, meta: { node: 'n' } });
    const wrongQueue = { v: 1 as const, id: 'x2', type: 'job.submitted', time: new Date(T()).toISOString(), queue: 'elsewhere', meta: { node: 'n' } };
    h.raw('docket.evt.job.q.j2', { ...wrongQueue, data: { ...(h.entries[0]!.event as { data: object }).data, job_id: 'j3' } });
    h.claim('j1', {}, { msgId: 'not-the-event-id' });
    const report = audit(h);
    expect(report.violations.map((v) => [v.seq, v.rule])).toEqual([
      [2, AuditRules.Undecodable],
      [3, AuditRules.Undecodable],
      [4, AuditRules.Undecodable],
      [5, AuditRules.Undecodable],
      [6, AuditRules.EnvelopeMismatch],
      [6, AuditRules.EnvelopeMismatch],
      [7, AuditRules.EnvelopeMismatch],
    ]);
    expect(report.violations[0]!.message).toBe('the payload is not JSON');
    expect(report.violations[2]!.message).toContain('data.worker');
    expect(report.violations[3]!.message).toContain('job.exploded');
  });

  test('a refused event leaves the aggregate as it was, so the rest of its history audits clean', () => {
    const h = new History('t10');
    h.submit('q', 'j1');
    h.succeed('j1', { runId: 'x' });
    h.claim('j1');
    h.succeed('j1');
    expect(rules(audit(h))).toEqual([AuditRules.IllegalTransition]);
  });
});

describe('report bounds', () => {
  test('--from/--to limit what is reported, not what is folded', () => {
    const h = new History('b1');
    h.submit('q', 'j1');
    h.claim('j1');
    h.succeed('j1', { runId: 'stale' }); // seq 3
    h.submit('q', 'j2');
    h.succeed('j2'); // seq 5: never claimed
    const messages = toRecorded(h.entries);
    expect(auditMessages(messages).violationCount).toBe(2);
    expect(auditMessages(messages, { fromSeq: 4 }).violations.map((v) => v.seq)).toEqual([5]);
    expect(auditMessages(messages, { toSeq: 4 }).violations.map((v) => v.seq)).toEqual([3]);
  });

  test('maxViolations truncates the list and keeps exact counts', () => {
    const h = new History('b2');
    for (let i = 0; i < 30; i++) {
      h.submit('q', `j${i}`);
      h.succeed(`j${i}`);
    }
    const report = auditMessages(toRecorded(h.entries), { maxViolations: 10 });
    expect(report.violations).toHaveLength(10);
    expect(report.violationCount).toBe(30);
    expect(report.byRule.illegal_transition).toBe(30);
    expect(report.truncated).toBe(true);
  });

  test('messages already seen (a re-read) are ignored', () => {
    const h = legalHistory();
    const messages = toRecorded(h.entries);
    const report = auditMessages([...messages.slice(0, 10), ...messages.slice(5)]);
    expect(report.ok).toBe(true);
    expect(report.messages).toBe(messages.length);
  });
});

let tick = 0;
function T(): number {
  tick += 1;
  return Date.parse('2030-01-01T00:00:00.000Z') + tick;
}
