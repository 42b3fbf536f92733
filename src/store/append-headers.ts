/**
 * The headers of one append to DOCKET (msg id, expected last subject sequence, expected stream),
 * encoded in one step. nats.js's `headers().append()` checks and canonicalises each key a
 * character at a time and its `encode()` rebuilds the block through a string loop and a
 * TextEncoder: ~1 KB of garbage per key, three keys per append, every commit (README
 * "Performance"). Here the keys are ours and fixed, and the values are ids and numbers we made.
 */
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';
import { InvalidRequestError } from '../errors.js';
import { EXPECTED_HEADER, EXPECTED_STREAM_HEADER, MSG_ID_HEADER, STREAM } from '../nats/subjects.js';

/** A header value may not break the block's lines (nats.js refuses \r and \n the same way). */
const LINE_BREAK = /[\r\n]/;

export class AppendHeaders extends MsgHdrsImpl {
  private readonly encoded: Uint8Array;

  constructor(msgId: string, expectedSeq: number) {
    super();
    if (LINE_BREAK.test(msgId)) throw new InvalidRequestError('a msg id cannot hold a line break');
    // The map too, so the headers read back as nats.js's would (get, has, iteration).
    this.headers.set(MSG_ID_HEADER, [msgId]);
    this.headers.set(EXPECTED_HEADER, [String(expectedSeq)]);
    this.headers.set(EXPECTED_STREAM_HEADER, [STREAM]);
    this.encoded = Buffer.from(`NATS/1.0\r\n${MSG_ID_HEADER}: ${msgId}\r\n${EXPECTED_HEADER}: ${expectedSeq}\r\n${EXPECTED_STREAM_HEADER}: ${STREAM}\r\n\r\n`);
  }

  override encode(): Uint8Array {
    return this.encoded;
  }
}
