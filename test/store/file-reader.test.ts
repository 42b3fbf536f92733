/** The checkpoint's front-to-back reader: lines across its read chunks, runs of bytes, a torn last line. */
import { closeSync, openSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { FileReader } from '../../src/store/file-reader.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'docket-file-reader-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function readerOf(content: Buffer): Promise<{ reader: FileReader; close: () => void }> {
  const path = join(dir, 'file');
  await writeFile(path, content);
  const fd = openSync(path, 'r');
  return { reader: new FileReader(fd), close: () => closeSync(fd) };
}

test('lines longer than a chunk (1 MiB) and lines across chunk ends come back whole; a last line without its newline is not a line', async () => {
  const long = 'a'.repeat(2_500_000);
  const lines = ['first', long, '', ...Array.from({ length: 50_000 }, (_, i) => `line ${i} é`)];
  const { reader, close } = await readerOf(Buffer.from(`${lines.join('\n')}\n{"torn":`));
  const got: string[] = [];
  for (let line = reader.nextLine(); line !== null; line = reader.nextLine()) got.push(line.toString('utf8'));
  close();
  expect(got).toEqual(lines);
});

test('runs of bytes are read into arrays from the chunk and from the file, skipped runs are not read, and the position follows', async () => {
  const bytes = Buffer.alloc(3_000_000);
  for (let i = 0; i < bytes.length; i++) bytes[i] = i % 251;
  const { reader, close } = await readerOf(Buffer.concat([Buffer.from('head\n'), bytes, Buffer.from('\ntail\n')]));
  expect(reader.nextLine()?.toString()).toBe('head');
  const first = new Uint8Array(1_500_000);
  expect(reader.readInto(first)).toBe(true);
  expect(Buffer.from(first).equals(bytes.subarray(0, 1_500_000))).toBe(true);
  reader.skip(1_000_000);
  expect(reader.position).toBe(5 + 2_500_000);
  const rest = new Uint8Array(500_000);
  expect(reader.readInto(rest)).toBe(true);
  expect(Buffer.from(rest).equals(bytes.subarray(2_500_000))).toBe(true);
  expect(reader.nextLine()?.length).toBe(0);
  expect(reader.nextLine()?.toString()).toBe('tail');
  expect(reader.nextLine()).toBeNull();
  expect(reader.readInto(new Uint8Array(1))).toBe(false);
  close();
});
