/**
 * Properties of the audit: any legal history (many jobs interleaved over two queues, with
 * retries, delays, moves, cancels, packed into commits of any size) audits clean; on any
 * plausible single-job history the machine rules are violated exactly at the events the
 * machines refuse; removing or editing a commit of a legal log is always caught at the next
 * commit of its partition.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { evolveJob, INITIAL_JOB_STATE } from '../../machines/index.js';
import { auditMessages, AuditRules, type AuditRule } from '../../src/audit/index.js';
import { jobEventSequenceArb, JOB_ID, QUEUE } from '../support/arbitraries.js';
import { History, playSteps, recordLog, STEP_OPS, toRecorded, type Step } from '../support/audit-log.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

const stepArb: fc.Arbitrary<Step> = fc.record({
  op: fc.constantFrom(...STEP_OPS),
  pick: fc.nat({ max: 1000 }),
  gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 90_000 })),
});
const stepsArb = fc.array(stepArb, { minLength: 5, maxLength: 150, size: 'max' });
const perCommitArb = fc.oneof(fc.constant(1), fc.integer({ min: 2, max: 40 }));

const MACHINE_RULES = new Set<AuditRule>([
  AuditRules.IllegalTransition,
  AuditRules.TwoOpenRuns,
  AuditRules.StaleRun,
  AuditRules.DoubleClose,
  AuditRules.ClaimedBeforeRunAt,
]);

describe('audit properties', () => {
  fcTest.prop([stepsArb, perCommitArb], { numRuns })('a legal history audits clean, however its events are packed into commits', (steps, eventsPerCommit) => {
    const h = new History('p');
    playSteps(h, steps);
    const messages = toRecorded(h.entries, 1, { eventsPerCommit });
    const report = auditMessages(messages);
    expect(report.violations).toEqual([]);
    expect(report.messages).toBe(messages.length);
    expect(report.events).toBe(h.entries.length);
  });

  fcTest.prop([jobEventSequenceArb, perCommitArb], { numRuns })('machine-rule violations are exactly the refused events, named by position', (events, eventsPerCommit) => {
    const h = new History('s');
    for (const event of events) h.raw(`q.${QUEUE}`, { ...event, aggregate: { kind: 'job', id: JOB_ID } });
    const { messages, positions } = recordLog(h.entries, 1, { eventsPerCommit });
    const report = auditMessages(messages);
    let state = INITIAL_JOB_STATE;
    const refused: { seq: number; index: number | null }[] = [];
    events.forEach((event, i) => {
      const next = evolveJob(state, event);
      if (next === null) refused.push(positions[i]!);
      else state = next;
    });
    const flagged = report.violations.filter((v) => MACHINE_RULES.has(v.rule)).map((v) => ({ seq: v.seq, index: v.index }));
    expect(flagged).toEqual(refused);
    // The other rules this history can break are about its retry_of (no such earlier job).
    for (const v of report.violations) if (!MACHINE_RULES.has(v.rule)) expect(v.rule).toBe(AuditRules.RetryChain);
  });

  fcTest.prop([stepsArb, perCommitArb, fc.nat()], { numRuns })('deleting any commit of a legal log breaks the sequence and the hash chain at the next commit of its partition', (steps, eventsPerCommit, which) => {
    const h = new History('d');
    playSteps(h, steps);
    const messages = toRecorded(h.entries, 1, { eventsPerCommit });
    if (messages.length === 0) return; // every step was a no-op
    const gone = messages[which % messages.length]!;
    const next = messages.find((m) => m.seq > gone.seq && m.subject === gone.subject);
    const report = auditMessages(messages.filter((m) => m !== gone));
    if (next === undefined) {
      // The last commit of its partition: nothing stored after it can tell (the stream's own
      // sequence does, and the audit reads the stream as stored).
      return;
    }
    const atNext = report.violations.filter((v) => v.seq === next.seq && v.index === null).map((v) => v.rule);
    expect(atNext).toEqual([AuditRules.SequenceGap, AuditRules.HashChain]);
  });

  fcTest.prop([stepsArb, perCommitArb, fc.nat(), fc.nat()], { numRuns })('changing any byte of a commit breaks the hash chain at the next commit of its partition', (steps, eventsPerCommit, which, where) => {
    const h = new History('e');
    playSteps(h, steps);
    const messages = toRecorded(h.entries, 1, { eventsPerCommit });
    if (messages.length === 0) return; // every step was a no-op
    const edited = messages[which % messages.length]!;
    const next = messages.find((m) => m.seq > edited.seq && m.subject === edited.subject);
    const data = Buffer.from(edited.data);
    const at = where % data.length;
    data[at] = data[at] === 0x30 ? 0x31 : 0x30; // another byte, whatever it was
    const report = auditMessages(messages.map((m) => (m === edited ? { ...m, data } : m)));
    if (next === undefined) return; // the partition's last commit: nothing chains to it yet
    expect(report.violations.some((v) => v.seq === next.seq && v.rule === AuditRules.HashChain)).toBe(true);
    // Nothing before the edit is blamed.
    expect(report.violations.every((v) => v.seq >= edited.seq)).toBe(true);
  });
});
