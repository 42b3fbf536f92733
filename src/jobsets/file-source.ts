/**
 * `{file: path}`: a JSON lines file, one key per line, read by the node that reads the source
 * (a relative path is resolved against that node's working directory, so in a cluster every
 * node needs the file at the same path: an absolute path on shared storage is safest).
 */
import { createReadStream } from 'node:fs';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { InvalidRequestError } from '../errors.js';
import type { FileSourceSpec } from '../commands/jobset-schemas.js';
import type { Key } from './key.js';
import { keyFromJsonLine } from './json-lines.js';
import { BATCH_KEYS, type KeySourceOptions, type RawKeySource } from './source.js';

export function createFileSource(spec: FileSourceSpec, options: KeySourceOptions): RawKeySource {
  const description = `file ${spec.file}`;
  const path = resolve(options.cwd ?? process.cwd(), spec.file);
  return { description, batches: () => fileKeys(path, options, description) };
}

async function* fileKeys(path: string, options: KeySourceOptions, description: string): AsyncGenerator<readonly Key[]> {
  const input = createReadStream(path, { encoding: 'utf8' });
  // Opening fails asynchronously (ENOENT, EACCES): wait for it so the error names the file
  // rather than surfacing from inside readline.
  await new Promise<void>((ok, reject) => {
    input.once('ready', () => ok());
    input.once('error', reject);
  }).catch((err: NodeJS.ErrnoException) => {
    throw new InvalidRequestError(`key source ${description}: ${err.code === 'ENOENT' ? 'no such file' : err.message}`, { cause: err, details: { source: description } });
  });
  const lines = createInterface({ input, crlfDelay: Infinity });
  let n = 0;
  let batch: Key[] = [];
  try {
    for await (const line of lines) {
      n += 1;
      const key = keyFromJsonLine(line, `${description} line ${n}`, options.attributes);
      if (key !== undefined) batch.push(key);
      if (batch.length >= BATCH_KEYS) {
        yield batch;
        batch = [];
      }
    }
    if (batch.length > 0) yield batch;
  } catch (err) {
    if (err instanceof InvalidRequestError) throw err;
    throw new InvalidRequestError(`key source ${description}: ${(err as Error).message}`, { cause: err, details: { source: description } });
  } finally {
    input.destroy();
  }
}
