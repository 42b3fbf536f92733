/**
 * The CLI's bulk verbs without NATS: the confirmation (a person at a terminal answers; without a
 * terminal it refuses at once, naming --yes), and the parsing of --older-than and --since.
 */
import { PassThrough } from 'node:stream';
import { describe, expect, test } from 'vitest';
import { confirm, parseDuration, parseSince } from '../../src/cli/bulk-commands.js';

function terminal(answer: string | null) {
  const input = new PassThrough();
  const output = new PassThrough();
  let asked = '';
  output.on('data', (chunk: Buffer) => (asked += chunk.toString()));
  // The answer is typed after the question is shown; null: the input ends (Ctrl-D).
  output.once('data', () => (answer === null ? input.end() : input.write(`${answer}\n`)));
  return { io: { input, output, interactive: true }, asked: () => asked };
}

describe('confirm', () => {
  test('asks on the output and takes y or yes (any case) as yes', async () => {
    for (const answer of ['y', 'Y', 'yes', ' YES ']) {
      const t = terminal(answer);
      await expect(confirm('Cancel 3 queued jobs of queue q?', t.io)).resolves.toBe(true);
      expect(t.asked()).toBe('Cancel 3 queued jobs of queue q? [y/N] ');
    }
  });

  test('anything else, an empty line or the end of input is no', async () => {
    for (const answer of ['', 'n', 'no', 'yess', 'sure', null]) {
      await expect(confirm('Clean?', terminal(answer).io), String(answer)).resolves.toBe(false);
    }
  });

  test('without a terminal it refuses at once, naming --yes, and reads nothing', async () => {
    const input = new PassThrough();
    const output = new PassThrough();
    await expect(confirm('Retry 2 failed jobs of queue q?', { input, output, interactive: false })).rejects.toMatchObject({
      code: 'invalid_request',
      message: 'not a terminal, so nobody can confirm: Retry 2 failed jobs of queue q. Pass --yes to do it without asking (or --dry-run to only count).',
    });
    expect(output.read()).toBeNull();
  });
});

describe('--older-than and --since', () => {
  test('durations: units, sums of them, a bare number of milliseconds', () => {
    expect(parseDuration('0', '--older-than')).toBe(0);
    expect(parseDuration('1500', '--older-than')).toBe(1500);
    expect(parseDuration('500ms', '--older-than')).toBe(500);
    expect(parseDuration('90s', '--older-than')).toBe(90_000);
    expect(parseDuration('30m', '--older-than')).toBe(1_800_000);
    expect(parseDuration('1h30m', '--older-than')).toBe(5_400_000);
    expect(parseDuration('7d', '--older-than')).toBe(604_800_000);
    expect(parseDuration('2w', '--older-than')).toBe(1_209_600_000);
  });

  test('anything else is refused naming the flag', () => {
    for (const bad of ['', 'soon', '-1h', '1.5h', '1h 30m', '10y', 'h', '1hx']) {
      expect(() => parseDuration(bad, '--older-than'), bad).toThrow(/--older-than must be a duration/);
    }
    expect(() => parseDuration('99999999999w', '--older-than')).toThrow(/too long/);
  });

  test('--since: an ISO time as given, or a duration before now', () => {
    const now = Date.parse('2026-06-01T12:00:00.000Z');
    expect(parseSince('2026-05-31T00:00:00Z', now)).toBe('2026-05-31T00:00:00.000Z');
    expect(parseSince('2h', now)).toBe('2026-06-01T10:00:00.000Z');
    expect(() => parseSince('yesterday', now)).toThrow(/--since must be a duration/);
  });
});
