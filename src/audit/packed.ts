/**
 * A compact binary form of stored messages (commits), so that a reader can hand batches of them
 * to an audit running on another thread with one transferred ArrayBuffer (no per-message
 * structured clone); the commit payload travels as stored, so the worker hashes the same bytes. Also the parsing of docket's two append headers from a raw NATS header block, shared
 * by the reader and the unpacker. Pure.
 *
 * Layout per message, little endian: seq f64, stored time ms f64, subject length u32, header
 * block length u32 (0: none), data length u32, the SHA-256 of the data (32 bytes); then the
 * subject (UTF-8), the raw header block (`NATS/1.0\r\nName: value\r\n...`) and the data.
 * The packing thread hashes the data (it has time to spare: it only reads), so the audit's
 * thread, the one that bounds its rate, does not.
 */
import { commitDigest } from '../nats/codec.js';
import { EXPECTED_HEADER, MSG_ID_HEADER } from '../nats/subjects.js';
import type { RecordedMessage } from './types.js';

const MSG_ID_NEEDLE = `\r\n${MSG_ID_HEADER}:`;
const EXPECTED_NEEDLE = `\r\n${EXPECTED_HEADER}:`;
const DIGEST = 32;
const FIXED = 28 + DIGEST;

function valueAfter(block: string, needle: string): string | null {
  const at = block.indexOf(needle);
  if (at < 0) return null;
  const start = at + needle.length;
  const end = block.indexOf('\r\n', start);
  return block.slice(start, end < 0 ? block.length : end).trim();
}

/** The value of header `name` in a raw header block; null when absent. */
export function headerValue(block: string, name: string): string | null {
  return valueAfter(block, `\r\n${name}:`);
}

/** A stored expected-sequence header as a number; null when absent or not a sequence. */
export function toExpectedSeq(value: string | null): number | null {
  if (value === null || value === '') return null;
  const n = Number(value);
  return Number.isInteger(n) && n >= 0 ? n : null;
}

/** docket's two append headers from a raw header block (as the bytes arrived). */
export function parseDocketHeaders(block: Uint8Array): { msgId: string | null; expected: number | null } {
  if (block.byteLength === 0) return { msgId: null, expected: null };
  const text = Buffer.from(block.buffer, block.byteOffset, block.byteLength).toString('utf8');
  return { msgId: valueAfter(text, MSG_ID_NEEDLE) || null, expected: toExpectedSeq(valueAfter(text, EXPECTED_NEEDLE)) };
}

/** Builds the header block docket would have stored, for a message known only by its values. */
export function headerBlockOf(msgId: string | null, expected: number | null): string {
  if (msgId === null && expected === null) return '';
  let block = 'NATS/1.0\r\n';
  if (msgId !== null) block += `${MSG_ID_HEADER}: ${msgId}\r\n`;
  if (expected !== null) block += `${EXPECTED_HEADER}: ${expected}\r\n`;
  return `${block}\r\n`;
}

const encoder = new TextEncoder();

/** Packs messages into buffers of about `capacity` bytes; `flush` hands each full one over. */
export class PackWriter {
  private buffer: ArrayBuffer;
  private bytes: Uint8Array;
  private view: DataView;
  private offset = 0;
  /** Messages in the current buffer. */
  count = 0;
  lastSeq = 0;

  constructor(
    private readonly flush: (buffer: ArrayBuffer, count: number, lastSeq: number) => void,
    private readonly capacity = 1 << 20,
  ) {
    this.buffer = new ArrayBuffer(capacity);
    this.bytes = new Uint8Array(this.buffer);
    this.view = new DataView(this.buffer);
  }

  add(seq: number, time: number, subject: Uint8Array | string, headerBlock: Uint8Array | null, data: Uint8Array): void {
    const subjectBytes = typeof subject === 'string' ? encoder.encode(subject) : subject;
    const hdrLength = headerBlock === null ? 0 : headerBlock.byteLength;
    const size = FIXED + subjectBytes.byteLength + hdrLength + data.byteLength;
    if (this.offset + size > this.bytes.byteLength) {
      this.end();
      if (size > this.bytes.byteLength) this.reset(Math.max(size, this.capacity));
    }
    const v = this.view;
    let o = this.offset;
    v.setFloat64(o, seq, true);
    v.setFloat64(o + 8, time, true);
    v.setUint32(o + 16, subjectBytes.byteLength, true);
    v.setUint32(o + 20, hdrLength, true);
    v.setUint32(o + 24, data.byteLength, true);
    this.bytes.set(commitDigest(data), o + 28);
    o += FIXED;
    this.bytes.set(subjectBytes, o);
    o += subjectBytes.byteLength;
    if (headerBlock !== null) {
      this.bytes.set(headerBlock, o);
      o += hdrLength;
    }
    this.bytes.set(data, o);
    this.offset = o + data.byteLength;
    this.count += 1;
    this.lastSeq = seq;
  }

  addRecorded(m: RecordedMessage): void {
    const block = headerBlockOf(m.msgId, m.expectedLastSubjectSeq);
    this.add(m.seq, m.time, m.subject, block === '' ? null : encoder.encode(block), m.data);
  }

  /** Hands over what is buffered (if anything) and starts a new buffer. */
  end(): void {
    if (this.count === 0) return;
    const full = this.offset === this.buffer.byteLength ? this.buffer : this.buffer.slice(0, this.offset);
    this.flush(full, this.count, this.lastSeq);
    this.reset(this.capacity);
  }

  private reset(capacity: number): void {
    this.buffer = new ArrayBuffer(capacity);
    this.bytes = new Uint8Array(this.buffer);
    this.view = new DataView(this.buffer);
    this.offset = 0;
    this.count = 0;
  }
}

/** Calls `onMessage` for every message packed in `buffer`, in order. */
export function unpack(buffer: ArrayBuffer, onMessage: (m: RecordedMessage) => void): void {
  const bytes = new Uint8Array(buffer);
  const v = new DataView(buffer);
  const whole = Buffer.from(buffer);
  let o = 0;
  while (o + FIXED <= bytes.byteLength) {
    const seq = v.getFloat64(o, true);
    const time = v.getFloat64(o + 8, true);
    const subjectLength = v.getUint32(o + 16, true);
    const hdrLength = v.getUint32(o + 20, true);
    const dataLength = v.getUint32(o + 24, true);
    const hash = whole.toString('hex', o + 28, o + FIXED);
    o += FIXED;
    const subject = whole.toString('utf8', o, o + subjectLength);
    o += subjectLength;
    const { msgId, expected } = hdrLength === 0 ? { msgId: null, expected: null } : parseDocketHeaders(bytes.subarray(o, o + hdrLength));
    o += hdrLength;
    const data = bytes.subarray(o, o + dataLength);
    o += dataLength;
    onMessage({ seq, subject, time, msgId, expectedLastSubjectSeq: expected, data, hash });
  }
}
