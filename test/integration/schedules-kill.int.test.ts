/**
 * A schedule every second in real time, `docket up` as a child process SIGKILLed for a few ticks
 * and started again on the same stream and data directory: each tick is fired or missed exactly
 * once (fires strictly increasing, no gap), the ticks due while it was down follow catch-up
 * `latest` (older ones missed `catchup`, the newest fired), every fire's job exists under its
 * derived id, and the audit of the whole log is clean.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { auditMessages, type RecordedMessage } from '../../src/audit/index.js';
import { Client } from '../../src/client/client.js';
import { scheduledJobId } from '../../src/ids.js';
import { readLog } from '../../src/store/read-log.js';
import { startDocketProcess, type DocketProcess } from '../support/docket-process.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let dataDir: string;

beforeAll(async () => {
  server = await startNatsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'docket-sched-kill-'));
});

afterAll(async () => {
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The next `n` job.submitted events of the queue, as their job ids. */
async function submitted(it: AsyncIterator<{ event: { type: string; aggregate: { id: string } } }>, n: number): Promise<string[]> {
  const ids: string[] = [];
  while (ids.length < n) {
    const next = await it.next();
    if (next.done) throw new Error('the event stream ended');
    if (next.value.event.type === 'job.submitted') ids.push(next.value.event.aggregate.id);
  }
  return ids;
}

test('SIGKILL of the node for a few ticks: each tick fired or missed once, catch-up latest applied, the audit clean', { timeout: 120_000 }, async () => {
  let node: DocketProcess = await startDocketProcess({ server: server.url, dataDir });
  const client = await Client.connect({ servers: server.url, requestTimeoutMs: 10_000 });
  const queue = 'sched-kill';
  const name = 'every-second';
  const stream = client.events({ queue, types: ['job.submitted'], from: 'all' })[Symbol.asyncIterator]() as AsyncIterator<{ event: { type: string; aggregate: { id: string } } }>;
  try {
    await client.putSchedule({ name, job: { queue }, cron: '* * * * * *', catchup: 'latest', overlap: 'allow_all' });
    await submitted(stream, 2);
    await node.kill('SIGKILL');
    // Down for a few ticks (the scenario itself: nothing to await but time).
    await new Promise((resolve) => setTimeout(resolve, 3_500));
    node = await startDocketProcess({ server: server.url, dataDir });
    await submitted(stream, 3);
    await client.deleteSchedule(name);
  } finally {
    await stream.return?.();
    await node.kill('SIGKILL');
  }

  const fired: number[] = [];
  const missed: { tick: number; reason: string }[] = [];
  const jobs = new Set<string>();
  const messages: RecordedMessage[] = [];
  for await (const m of readLog(client.nc, {})) {
    messages.push(m);
    const commit = JSON.parse(new TextDecoder().decode(m.data)) as { events: { type: string; aggregate: { kind: string; id: string }; data: Record<string, unknown> }[] };
    for (const e of commit.events) {
      if (e.type === 'job.submitted') jobs.add(e.aggregate.id);
      if (e.aggregate.kind !== 'schedule' || e.aggregate.id !== name) continue;
      if (e.type === 'schedule.fired') {
        fired.push(Date.parse(e.data['tick'] as string));
        expect(e.data['job_id']).toBe(scheduledJobId(name, e.data['tick'] as string));
      }
      if (e.type === 'schedule.missed') {
        if ('tick' in e.data) missed.push({ tick: Date.parse(e.data['tick'] as string), reason: e.data['reason'] as string });
        else for (let t = Date.parse(e.data['from'] as string); t <= Date.parse(e.data['to'] as string); t += 1_000) missed.push({ tick: t, reason: e.data['reason'] as string });
      }
    }
  }
  await client.close();

  // Every fire's job exists under its derived id.
  for (const tick of fired) expect(jobs.has(scheduledJobId(name, new Date(tick).toISOString()))).toBe(true);
  // Fires and misses cover every second from the first fire to the last handled tick, each once.
  const all = [...fired, ...missed.map((m) => m.tick)].sort((a, b) => a - b);
  expect(new Set(all).size).toBe(all.length);
  for (let i = 1; i < all.length; i++) expect(all[i]! - all[i - 1]!).toBe(1_000);
  // The downtime: ticks missed `catchup` (at least two of the ~3 seconds down), then the newest of them fired.
  const catchup = missed.filter((m) => m.reason === 'catchup').map((m) => m.tick);
  expect(catchup.length).toBeGreaterThanOrEqual(2);
  expect(missed.every((m) => m.reason === 'catchup')).toBe(true);
  for (let i = 1; i < catchup.length; i++) expect(catchup[i]! - catchup[i - 1]!).toBe(1_000);
  expect(fired).toContain(catchup.at(-1)! + 1_000);
  expect(auditMessages(messages).violations).toEqual([]);

  // The same real log without the commit of the first fire: the audit names the tick it leaves
  // neither fired nor missed (at the next fire), besides the broken chain.
  const firstTick = new Date(Math.min(...fired)).toISOString();
  const holdsFirstFire = (m: RecordedMessage) => new TextDecoder().decode(m.data).includes(`"tick":"${firstTick}"`) && m.subject === 'docket.log.sys';
  const tampered = auditMessages(messages.filter((m) => !holdsFirstFire(m)));
  expect(tampered.byRule.tick_coverage).toBe(1);
  expect(tampered.violations.find((v) => v.rule === 'tick_coverage')?.message).toContain(`from ${firstTick}`);
});
