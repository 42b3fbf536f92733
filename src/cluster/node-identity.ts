/**
 * A node's name, kept in its data directory (`<dataDir>/node-id`): made on the first start,
 * read on every later one. Leadership leases are held by name, so a node restarted on its data
 * directory (after a crash, say) is the holder of its predecessor's leases and takes them back
 * at once, instead of waiting for them to expire as a stranger would. Without a data directory
 * a node is `<host>-<pid>`, new on every start.
 *
 * Two processes on one data directory would share a name; they already share a checkpoint file,
 * which is not supported either.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { isIdToken, toNodeToken } from '../nats/subjects.js';

export const NODE_ID_FILE = 'node-id';

/** The name of a node with this data directory (or none). */
export async function nodeIdentity(dataDir: string | undefined): Promise<string> {
  const fresh = `${hostname()}-${process.pid}`;
  if (dataDir === undefined) return toNodeToken(fresh);
  const file = join(dataDir, NODE_ID_FILE);
  const stored = await readName(file);
  if (stored !== undefined) return stored;
  // Host and a random part, not the pid: the name outlives this process.
  const name = toNodeToken(`${hostname().slice(0, 100)}-${randomBytes(4).toString('hex')}`);
  await mkdir(dataDir, { recursive: true });
  try {
    // 'wx': of two first starts racing on one directory, one name wins and both read it.
    await writeFile(file, `${name}\n`, { flag: 'wx' });
    return name;
  } catch (err) {
    const winner = await readName(file);
    if (winner !== undefined) return winner;
    throw err;
  }
}

async function readName(file: string): Promise<string | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const name = text.trim();
  if (!isIdToken(name)) throw new Error(`${file} does not hold a node name ([A-Za-z0-9_-]{1,128}): fix or delete it`);
  return name;
}
