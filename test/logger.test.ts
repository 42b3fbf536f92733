/** Child loggers: bound fields when the logger writes, no child at all when it writes nothing. */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { expect, test } from 'vitest';
import { childLogger, silentLogger } from '../src/logger.js';

test('a child of a writing logger carries its bindings; a silent logger is handed back as it is', () => {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString('utf8')) as Record<string, unknown>);
      done();
    },
  });
  const log = pino({ level: 'info' }, sink);
  const child = childLogger(log, { jobId: 'j1', runId: 'r1' });
  expect(child).not.toBe(log);
  child.info('claimed');
  expect(lines).toEqual([expect.objectContaining({ jobId: 'j1', runId: 'r1', msg: 'claimed' })]);

  expect(childLogger(silentLogger, { jobId: 'j1' })).toBe(silentLogger);
});
