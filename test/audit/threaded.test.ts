/**
 * The packed hand-over between the reader and an audit on another thread: packing loses nothing
 * (headers present, absent, odd; messages larger than a buffer), and the audit on a worker
 * thread reports exactly what the inline audit reports.
 */
import { describe, expect, test } from 'vitest';
import { auditMessages, type RecordedMessage } from '../../src/audit/index.js';
import { PackWriter, parseDocketHeaders, unpack } from '../../src/audit/packed.js';
import { commitHash } from '../../src/nats/codec.js';
import { AUTO_THREAD_MIN_BYTES, autoThread, startPackedAudit } from '../../src/audit/threaded.js';
import { History, playSteps, STEP_OPS, toRecorded } from '../support/audit-log.js';

function roundTrip(messages: readonly RecordedMessage[], capacity: number): { out: RecordedMessage[]; buffers: number } {
  const out: RecordedMessage[] = [];
  let buffers = 0;
  const writer = new PackWriter((buffer) => {
    buffers += 1;
    unpack(buffer, (m) => out.push({ ...m, data: new Uint8Array(m.data) }));
  }, capacity);
  for (const m of messages) writer.addRecorded(m);
  writer.end();
  return { out, buffers };
}

/** A log with tampering of every kind the headers can carry, commits of many events, and a large commit. */
function mixedLog(): RecordedMessage[] {
  const h = new History('pk');
  const steps = Array.from({ length: 200 }, (_, i) => ({ op: STEP_OPS[(i * 7) % STEP_OPS.length]!, pick: (i * 31) % 97, gapMs: 500 }));
  playSteps(h, steps);
  h.submit('qa', 'tampered');
  h.succeed('tampered', {}, { expected: null, msgId: null });
  h.claim('tampered', { runId: 'ü-run' }, { msgId: 'ü-id' });
  h.raw('q.qa', { blob: 'x'.repeat(100_000) }, { msgId: 'big' });
  return toRecorded(h.entries, 41, { eventsPerCommit: 7 });
}

describe('packed batches', () => {
  test('round-trip every field, across buffers, with messages larger than one', () => {
    const messages = mixedLog();
    const { out, buffers } = roundTrip(messages, 64 * 1024);
    expect(buffers).toBeGreaterThanOrEqual(2);
    expect(out.find((m) => m.msgId === 'ü-id')).toBeDefined();
    // Each carries the SHA-256 of its data, computed by the packing thread.
    expect(out).toEqual(messages.map((m) => ({ ...m, data: new Uint8Array(m.data), hash: commitHash(m.data) })));
  });

  test('headers are read from the raw block as stored', () => {
    const block = new TextEncoder().encode('NATS/1.0\r\nNats-Msg-Id: e-1\r\nNats-Expected-Last-Subject-Sequence: 42\r\nNats-Expected-Stream: DOCKET\r\n\r\n');
    expect(parseDocketHeaders(block)).toEqual({ msgId: 'e-1', expected: 42 });
    expect(parseDocketHeaders(new TextEncoder().encode('NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: x\r\n\r\n'))).toEqual({ msgId: null, expected: null });
    expect(parseDocketHeaders(new Uint8Array(0))).toEqual({ msgId: null, expected: null });
  });
});

describe('the audit on a worker thread', () => {
  test('starts, and reports exactly what the inline audit reports', async () => {
    const messages = mixedLog();
    const expected = auditMessages(messages, { maxViolations: 1000 });
    expect(expected.ok).toBe(false);
    const audit = await startPackedAudit({ thread: true, maxViolations: 1000 });
    expect(audit.noThreadReason ?? null).toBeNull();
    expect(audit.mode).toBe('thread');
    const writer = new PackWriter((buffer, count, lastSeq) => audit.write(buffer, count, lastSeq), 32 * 1024);
    for (const m of messages) writer.addRecorded(m);
    writer.end();
    expect(audit.backlog).toBeGreaterThan(0);
    await audit.whenBelow(1);
    expect(audit.backlog).toBe(0);
    expect(await audit.finish()).toEqual(expected);
  });

  test('inline when asked, with the same report', async () => {
    const messages = mixedLog();
    const audit = await startPackedAudit({ thread: false });
    expect(audit.mode).toBe('inline');
    const writer = new PackWriter((buffer, count, lastSeq) => audit.write(buffer, count, lastSeq));
    for (const m of messages) writer.addRecorded(m);
    writer.end();
    expect(await audit.finish()).toEqual(auditMessages(messages));
  });
});

describe('--thread auto', () => {
  test('takes a worker thread only for a large read with a second core for it', () => {
    expect(autoThread(AUTO_THREAD_MIN_BYTES - 1, 2)).toBe(false);
    expect(autoThread(AUTO_THREAD_MIN_BYTES, 2)).toBe(true);
    expect(autoThread(AUTO_THREAD_MIN_BYTES * 10, 16)).toBe(true);
    expect(autoThread(AUTO_THREAD_MIN_BYTES * 10, 1)).toBe(false);
    expect(autoThread(0, 16)).toBe(false);
  });
});
