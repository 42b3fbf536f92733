/**
 * Properties of the audit: any legal history (many jobs interleaved over two queues, with
 * retries, delays, moves, cancels) audits clean; on any plausible single-job history the
 * machine rules are violated exactly at the events the machines refuse; removing an event from
 * a legal log is always caught.
 */
import { test as fcTest } from '@fast-check/vitest';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { evolveJob, INITIAL_JOB_STATE } from '../../machines/index.js';
import { auditMessages, AuditRules, type AuditRule } from '../../src/audit/index.js';
import { jobEventSequenceArb, JOB_ID, QUEUE } from '../support/arbitraries.js';
import { History, playSteps, STEP_OPS, toRecorded, type Step } from '../support/audit-log.js';

const numRuns = Number(process.env.DOCKET_NUM_RUNS ?? 200);

const stepArb: fc.Arbitrary<Step> = fc.record({
  op: fc.constantFrom(...STEP_OPS),
  pick: fc.nat({ max: 1000 }),
  gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 90_000 })),
});
const stepsArb = fc.array(stepArb, { minLength: 5, maxLength: 150, size: 'max' });

const MACHINE_RULES = new Set<AuditRule>([
  AuditRules.IllegalTransition,
  AuditRules.TwoOpenRuns,
  AuditRules.StaleRun,
  AuditRules.DoubleClose,
  AuditRules.ClaimedBeforeRunAt,
]);

describe('audit properties', () => {
  fcTest.prop([stepsArb], { numRuns })('a legal history audits clean', (steps) => {
    const h = new History('p');
    playSteps(h, steps);
    const report = auditMessages(toRecorded(h.entries));
    expect(report.violations).toEqual([]);
    expect(report.messages).toBe(h.entries.length);
  });

  fcTest.prop([jobEventSequenceArb], { numRuns })('machine-rule violations are exactly the refused events', (events) => {
    const h = new History('s');
    for (const event of events) h.raw(`docket.evt.job.${QUEUE}.${JOB_ID}`, event);
    const report = auditMessages(toRecorded(h.entries));
    let state = INITIAL_JOB_STATE;
    const refused: number[] = [];
    events.forEach((event, i) => {
      const next = evolveJob(state, event);
      if (next === null) refused.push(i + 1);
      else state = next;
    });
    const flagged = report.violations.filter((v) => MACHINE_RULES.has(v.rule)).map((v) => v.seq);
    expect(flagged).toEqual(refused);
    // The other rules this history can break are about its retry_of (no such earlier job).
    for (const v of report.violations) if (!MACHINE_RULES.has(v.rule)) expect(v.rule).toBe(AuditRules.RetryChain);
  });

  fcTest.prop([stepsArb, fc.nat()], { numRuns })('deleting any one event of a legal log breaks a rule at the next event of its subject', (steps, which) => {
    const h = new History('d');
    playSteps(h, steps);
    const messages = toRecorded(h.entries);
    const gone = messages[which % messages.length]!;
    const next = messages.find((m) => m.seq > gone.seq && m.subject === gone.subject);
    const report = auditMessages(messages.filter((m) => m !== gone));
    if (next === undefined) {
      // The last event of its subject: nothing stored after it can tell (the stream's own
      // sequence does, and the audit reads the stream as stored).
      return;
    }
    expect(report.violations.some((v) => v.seq === next.seq && v.rule === AuditRules.SequenceGap)).toBe(true);
  });
});
