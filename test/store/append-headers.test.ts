/**
 * An append's headers, encoded in one step (src/store/append-headers.ts), read by nats-server as
 * nats.js's own would be: the same bytes, and the same values read back.
 */
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';
import { expect, test } from 'vitest';
import { AppendHeaders } from '../../src/store/append-headers.js';

function viaNatsJs(msgId: string, expectedSeq: number): Uint8Array {
  const h = new MsgHdrsImpl();
  h.append('Nats-Msg-Id', msgId);
  h.append('Nats-Expected-Last-Subject-Sequence', String(expectedSeq));
  h.append('Nats-Expected-Stream', 'DOCKET');
  return h.encode();
}

test('encodes the bytes nats.js would, for the first commit and a later one', () => {
  for (const [id, seq] of [['q.emails.node-1.3.1', 0], ['sys.n.12.98765', 4_294_967_296]] as const) {
    expect(Buffer.from(new AppendHeaders(id, seq).encode()).toString()).toBe(Buffer.from(viaNatsJs(id, seq)).toString());
  }
});

test('reads back its values, as headers decoded from the wire do', () => {
  const h = new AppendHeaders('q.a.n.1.7', 41);
  expect(h.get('Nats-Msg-Id')).toBe('q.a.n.1.7');
  expect(h.get('Nats-Expected-Last-Subject-Sequence')).toBe('41');
  expect(h.get('Nats-Expected-Stream')).toBe('DOCKET');
  const decoded = MsgHdrsImpl.decode(h.encode());
  expect(decoded.get('Nats-Msg-Id')).toBe('q.a.n.1.7');
  expect(decoded.get('Nats-Expected-Last-Subject-Sequence')).toBe('41');
});

test('refuses a msg id that would break the header block', () => {
  expect(() => new AppendHeaders('q.a\r\nNats-Expected-Stream: OTHER', 1)).toThrow(/line break/);
});
