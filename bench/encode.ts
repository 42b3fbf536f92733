/**
 * Why the codec encodes with Buffer.from: a job.submitted envelope, stringified and encoded to
 * UTF-8 by TextEncoder.encode and by Buffer.from, alternating, three rounds.
 *
 *   npx tsx bench/encode.ts [iterations=200000]
 */
import { jobEvent } from './lib/events.js';

const iterations = Number(process.argv[2] ?? 200_000);
const envelopes = Array.from({ length: 1_000 }, (_, i) => jobEvent(i, 0));
const encoder = new TextEncoder();
const ways: Record<string, (text: string) => Uint8Array> = {
  'TextEncoder.encode': (text) => encoder.encode(text),
  'Buffer.from': (text) => Buffer.from(text),
};

let bytes = 0;
for (let round = 0; round < 3; round++) {
  const line: string[] = [];
  for (const [name, encode] of Object.entries(ways)) {
    const t0 = performance.now();
    for (let i = 0; i < iterations; i++) bytes += encode(JSON.stringify(envelopes[i % envelopes.length])).length;
    line.push(`${name} ${(((performance.now() - t0) * 1000) / iterations).toFixed(2)} µs`);
  }
  process.stdout.write(`round ${round}: ${line.join(', ')} (stringify + encode, per envelope)\n`);
}
if (bytes === 0) throw new Error('nothing encoded');
