/**
 * The command, file and inline key sources (src/jobsets/): JSON lines normalised like any
 * source's keys; a command runs without a shell, is stopped by its timeout and its output bound,
 * and a failure quotes its stderr; a missing file or a bad line names itself. Real processes and
 * files, in a temporary directory.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { InvalidRequestError } from '../../src/errors.js';
import { createCommandSource } from '../../src/jobsets/command-source.js';
import { readRefreshInputs } from '../../src/jobsets/refresh-inputs.js';
import { createKeySource, keySourceOf, readAllKeys } from '../../src/jobsets/source.js';

const dir = mkdtempSync(join(tmpdir(), 'docket-keys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const env = { PATH: process.env.PATH };

async function failure(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidRequestError);
    return (err as Error).message;
  }
  throw new Error('expected the source to fail');
}

describe('command source', () => {
  test("stdout's JSON lines are keys, normalised; blank lines are skipped", async () => {
    const keys = await readAllKeys(createKeySource({ command: ['printf', '{"b":"x","a":1}\\n\\n{"a":2,"b":"y","ok":true}\\n'] }, { env }));
    expect(keys).toEqual([{ b: 'x', a: 1 }, { a: 2, b: 'y', ok: 1 }]);
  });

  test('no shell: arguments are passed as they are, nothing is expanded', async () => {
    const keys = await readAllKeys(createKeySource({ command: ['printf', '{"v":"%s"}\\n', '$HOME;*'] }, { env }));
    expect(keys).toEqual([{ v: '$HOME;*' }]);
  });

  test('a non-zero exit fails the source, quoting the end of its stderr', async () => {
    const message = await failure(readAllKeys(createKeySource({ command: ['sh', '-c', 'echo \'{"a":1}\'; echo "db down" >&2; exit 3'] }, { env })));
    expect(message).toBe('key source command sh -c "echo \'{\\"a\\":1}\'; echo \\"db down\\" >&2; exit 3": exited with code 3: db down');
  });

  test('a program that cannot start is an error naming it', async () => {
    expect(await failure(readAllKeys(createKeySource({ command: ['/no/such/program'] }, { env })))).toMatch(/^key source command \/no\/such\/program: could not start \(spawn \/no\/such\/program ENOENT\)/);
  });

  test('the timeout stops the program', async () => {
    const started = Date.now();
    const source = keySourceOf(createCommandSource({ command: ['sh', '-c', 'echo \'{"a":1}\'; sleep 30'] }, { env, timeoutMs: 300 }));
    expect(await failure(readAllKeys(source))).toMatch(/timed out after 300 ms/);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  test('output beyond the bound stops the program', async () => {
    const source = keySourceOf(createCommandSource({ command: ['sh', '-c', 'while true; do echo \'{"a":1}\'; done'] }, { env, timeoutMs: 30_000, maxOutputBytes: 10_000 }));
    expect(await failure(readAllKeys(source))).toMatch(/printed more than 10000 bytes/);
  });

  test('a line that is not a key names its line', async () => {
    expect(await failure(readAllKeys(createKeySource({ command: ['printf', '{"a":1}\\nnot json\\n'] }, { env })))).toMatch(/^key source command printf .* line 2: not JSON/);
    expect(await failure(readAllKeys(createKeySource({ command: ['printf', '{"a":1}\\n[1]\\n'] }, { env })))).toMatch(/line 2: a key must be a JSON object/);
  });

  test('more keys than the limit are refused', async () => {
    expect(await failure(readAllKeys(createKeySource({ command: ['printf', '{"a":1}\\n{"a":2}\\n{"a":3}\\n'] }, { env, maxKeys: 2 })))).toMatch(/more than 2 keys/);
  });
});

describe('file source', () => {
  test('a JSON lines file, relative to the working directory given, with declared attributes', async () => {
    writeFileSync(join(dir, 'keys.jsonl'), '{"subject":1,"session":2,"note":"x"}\r\n{"subject":1,"session":3}\n');
    const keys = await readAllKeys(createKeySource({ file: 'keys.jsonl' }, { env, cwd: dir, attributes: ['subject', 'session'] }));
    expect(keys).toEqual([{ subject: 1, session: 2 }, { subject: 1, session: 3 }]);
  });

  test('a missing file and a bad line are errors naming them', async () => {
    expect(await failure(readAllKeys(createKeySource({ file: 'absent.jsonl' }, { env, cwd: dir })))).toBe('key source file absent.jsonl: no such file');
    writeFileSync(join(dir, 'bad.jsonl'), '{"a":1}\n{"a":{"b":2}}\n');
    expect(await failure(readAllKeys(createKeySource({ file: 'bad.jsonl' }, { env, cwd: dir })))).toBe('key source file bad.jsonl line 2: attribute "a" is an object: a key attribute must be a scalar');
  });
});

describe('inline source and restrict', () => {
  test('inline keys are normalised, and restrict filters them', async () => {
    const source = createKeySource({ keys: [{ lab: 'smith', id: 1, flag: true }, { lab: 'jones', id: 2, flag: false }] }, { env });
    expect(await readAllKeys(source)).toEqual([{ lab: 'smith', id: 1, flag: 1 }, { lab: 'jones', id: 2, flag: 0 }]);
    expect(await readAllKeys(source, { lab: 'jones' })).toEqual([{ lab: 'jones', id: 2, flag: 0 }]);
    expect(await readAllKeys(source, [{ id: 1 }, { id: 2 }])).toHaveLength(2);
  });
});

describe('readRefreshInputs', () => {
  test('reads the projected source and the whole target; a failing target fails the read naming it', async () => {
    writeFileSync(join(dir, 'target.jsonl'), '{"subject":1,"session":2,"method":"a"}\n');
    const inputs = await readRefreshInputs(
      { key_source: { keys: [{ subject: 1, session: 2, note: 'x' }, { subject: 1, session: 3, note: 'y' }] }, target: { file: 'target.jsonl' }, attributes: ['subject', 'session'] },
      { env, cwd: dir },
    );
    expect(inputs).toEqual({ source: [{ subject: 1, session: 2 }, { subject: 1, session: 3 }], target: [{ subject: 1, session: 2, method: 'a' }] });
    expect(await failure(readRefreshInputs({ key_source: { keys: [{ a: 1 }] }, target: { file: 'missing.jsonl' } }, { env, cwd: dir }))).toBe('key source file missing.jsonl: no such file');
    expect(await readRefreshInputs({ key_source: { keys: [{ a: 1 }] } }, { env })).toEqual({ source: [{ a: 1 }], target: [] });
  });
});
