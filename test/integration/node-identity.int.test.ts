/**
 * Issue 12 item 9: a node restarted on its data directory is the same node. Its name is kept in
 * `<dataDir>/node-id`, so after a crash (its leases left in KV, unexpired) it takes its own
 * leadership leases back at once instead of waiting them out as a stranger would.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { NODE_ID_FILE, nodeIdentity } from '../../src/cluster/node-identity.js';
import { startNode, type DocketNode } from '../../src/node.js';
import { uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let nc: NatsConnection;
const dirs: string[] = [];

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'docket-identity-'));
  dirs.push(dir);
  return dir;
}

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url, name: 'identity-test' });
});

afterAll(async () => {
  await nc?.drain();
  await server?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function request(subject: string, body: unknown): Promise<Record<string, unknown>> {
  return (await nc.request(subject, JSON.stringify(body), { timeout: 10_000 })).json<Record<string, unknown>>();
}

test('item 9: a node restarted on its data directory after a crash keeps its name and serves its queue at once, well before its old lease expires', async ({ task }) => {
  const LEASE_MS = 30_000;
  const dataDir = tempDir();
  const queue = uniqueQueue(task.name);
  // The first life on connections of the test's own, so the crash can cut them: nothing is
  // released, the lease stays in KV with 30 s to run.
  const ownNc = await connect({ servers: server.url, name: 'identity-first' });
  const ownAppendNc = await connect({ servers: server.url, name: 'identity-first-appends', noEcho: true });
  let first: DocketNode | undefined = await startNode({ nc: ownNc, appendNc: ownAppendNc, dataDir, leadershipLeaseMs: LEASE_MS });
  let second: DocketNode | undefined;
  try {
    await ownNc.flush();
    expect(readFileSync(join(dataDir, NODE_ID_FILE), 'utf8').trim()).toBe(first.name);
    for (let i = 0; i < 2; i++) expect(await request('docket.cmd.submit', { queue, params: { i } })).toMatchObject({ ok: true });
    expect(await request(`docket.work.${queue}.claim`, { worker: 'w' })).toMatchObject({ ok: true, jobs: [{ params: { i: 0 } }] });
    expect(first.leadership.isLeader(queue)).toBe(true);

    // Crash: the connections go, and with them every chance to release the lease.
    await Promise.all([ownNc.close(), ownAppendNc.close()]);
    await first.close().catch(() => undefined);
    first = undefined;

    const restarted = Date.now();
    second = await startNode({ servers: server.url, dataDir, leadershipLeaseMs: LEASE_MS });
    await second.nc.flush();
    const reply = await request(`docket.work.${queue}.claim`, { worker: 'w' });
    const waited = Date.now() - restarted;
    expect(second.name).toBe(readFileSync(join(dataDir, NODE_ID_FILE), 'utf8').trim());
    expect(reply).toMatchObject({ ok: true, jobs: [{ params: { i: 1 } }] });
    expect(second.leadership.isLeader(queue)).toBe(true);
    expect(waited).toBeLessThan(LEASE_MS / 3);
  } finally {
    await first?.close().catch(() => undefined);
    await second?.close();
  }
});

test('item 9: the name is made once per data directory and kept; without one a node is <host>-<pid>; a corrupt file is an error, not a new name', async () => {
  const dir = tempDir();
  const name = await nodeIdentity(dir);
  expect(name).toMatch(/^[A-Za-z0-9_-]{1,128}$/);
  expect(await nodeIdentity(dir)).toBe(name);
  expect(await nodeIdentity(tempDir())).not.toBe(name);
  expect(await nodeIdentity(undefined)).toMatch(new RegExp(`-${process.pid}$`));
  writeFileSync(join(dir, NODE_ID_FILE), 'not a token!\n');
  await expect(nodeIdentity(dir)).rejects.toThrow(/node-id/);
});
