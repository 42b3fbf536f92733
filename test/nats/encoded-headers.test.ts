/**
 * Headers encoded in one step (src/nats/encoded-headers.ts), read as nats.js's own would be:
 * the same bytes on the wire, and the same values read back.
 */
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';
import { expect, test } from 'vitest';
import { appendHeaders, EncodedHeaders, liveHeaders } from '../../src/nats/encoded-headers.js';

function viaNatsJs(entries: readonly (readonly [string, string])[]): string {
  const h = new MsgHdrsImpl();
  for (const [key, value] of entries) h.append(key, value);
  return Buffer.from(h.encode()).toString();
}

test("an append's headers: the bytes nats.js would send, for the first commit and a later one", () => {
  for (const [id, seq] of [['q.emails.node-1.3.1', 0], ['sys.n.12.98765', 4_294_967_296]] as const) {
    const expected = viaNatsJs([['Nats-Msg-Id', id], ['Nats-Expected-Last-Subject-Sequence', String(seq)], ['Nats-Expected-Stream', 'DOCKET']]);
    expect(Buffer.from(appendHeaders(id, seq).encode()).toString()).toBe(expected);
  }
});

test("a live commit's headers: the bytes nats.js would send", () => {
  expect(Buffer.from(liveHeaders(17).encode()).toString()).toBe(viaNatsJs([['Docket-Seq', '17']]));
});

test('reads back its values, as headers decoded from the wire do', () => {
  const h = appendHeaders('q.a.n.1.7', 41);
  expect(h.get('Nats-Msg-Id')).toBe('q.a.n.1.7');
  expect(h.get('Nats-Expected-Last-Subject-Sequence')).toBe('41');
  expect(h.get('Nats-Expected-Stream')).toBe('DOCKET');
  const decoded = MsgHdrsImpl.decode(h.encode());
  expect(decoded.get('Nats-Msg-Id')).toBe('q.a.n.1.7');
  expect(decoded.get('Nats-Expected-Last-Subject-Sequence')).toBe('41');
});

test('a key given twice is sent twice and read back as both, as nats.js does', () => {
  const entries = [['X-A', '1'], ['X-A', '2']] as const;
  const h = new EncodedHeaders(entries);
  expect(Buffer.from(h.encode()).toString()).toBe(viaNatsJs(entries));
  expect(h.values('X-A')).toEqual(['1', '2']);
});

test('cannot change once encoded: a change would be read back but never sent', () => {
  const h = liveHeaders(3);
  expect(() => h.set('Docket-Seq', '4')).toThrow(/cannot change/);
  expect(() => h.append('X-Other', '1')).toThrow(/cannot change/);
  expect(() => h.delete('Docket-Seq')).toThrow(/cannot change/);
  expect(h.get('Docket-Seq')).toBe('3');
});

test('refuses a value that would break the header block', () => {
  expect(() => appendHeaders('q.a\r\nNats-Expected-Stream: OTHER', 1)).toThrow(/line break/);
  expect(() => new EncodedHeaders([['Docket-Seq', '1\n']])).toThrow(/line break/);
});
