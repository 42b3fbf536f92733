/**
 * Crash test with real processes (issue 3): `docket up` as a child process, 5,000 jobs, workers
 * running, the node SIGKILLed three times mid-run and restarted. Every job must end succeeded, no
 * job may ever be claimed by a second run while the first is open (checked from the log), and
 * the machines must accept every event of the log.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { evolveJob, INITIAL_JOB_STATE, positionOf, type JobEvent, type JobState } from '../../machines/index.js';
import { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { decodeCommit } from '../../src/nats/codec.js';
import { STREAM, subjects } from '../../src/nats/subjects.js';
import { readLog } from '../../src/store/read-log.js';
import { startDocketProcess, type DocketProcess } from '../support/docket-process.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

const JOBS = Number(process.env['DOCKET_KILL_JOBS'] ?? 5_000);
const KILLS = 3;

let server: TestNatsServer;
let dataDir: string;

beforeAll(async () => {
  server = await startNatsServer();
  dataDir = mkdtempSync(join(tmpdir(), 'docket-kill-'));
});

afterAll(async () => {
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** Reads every commit of the stream (it is quiet by then) as events (position, live subject, event). */
async function readWholeLog(client: Client): Promise<{ seq: number; subject: string; event: JobEvent }[]> {
  const jsm = await jetstreamManager(client.nc);
  const last = (await jsm.streams.info(STREAM)).state.last_seq;
  const out: { seq: number; subject: string; event: JobEvent }[] = [];
  if (last === 0) return out;
  for await (const m of readLog(client.nc, { toSeq: last })) {
    decodeCommit(m.data).events.forEach((event, index) => {
      out.push({ seq: positionOf(m.seq, index), subject: subjects.job(event.queue ?? '', event.aggregate.id), event: event as JobEvent });
    });
  }
  return out;
}

test(`${JOBS} jobs survive ${KILLS} SIGKILLs of the node`, { timeout: 300_000 }, async () => {
  let node: DocketProcess = await startDocketProcess({ server: server.url, dataDir });
  const client = await Client.connect({ servers: server.url, requestTimeoutMs: 10_000 });
  const queue = 'crash';
  for (let i = 0; i < JOBS; i += 1_000) {
    const { jobs } = await client.submitBatch(Array.from({ length: Math.min(1_000, JOBS - i) }, (_, j) => ({ queue, params: { i: i + j }, max_attempts: 5, backoff: { base_ms: 100, max_ms: 1_000, jitter: 0.5 } })));
    expect(jobs.every((j) => j.ok)).toBe(true);
  }

  let handled = 0;
  const workers = [0, 1].map(
    () =>
      new Worker({
        servers: server.url,
        queue,
        concurrency: 20,
        leaseMs: 3_000,
        claimWaitMs: 500,
        handler: async () => {
          handled += 1;
          // Simulated work, so that runs are in flight whenever the node is killed.
          await new Promise((r) => setTimeout(r, 5));
          return null;
        },
      }),
  );
  for (const worker of workers) await worker.start();

  // One iterator over every job.succeeded of the queue, from the start of the stream.
  const succeededEvents = client.events({ queue, types: ['job.succeeded'], from: 'all' })[Symbol.asyncIterator]();
  let succeededSeen = 0;
  const waitForSucceeded = async (atLeast: number) => {
    while (succeededSeen < atLeast) {
      const next = await succeededEvents.next();
      if (next.done) throw new Error('event stream ended');
      succeededSeen += 1;
    }
  };

  for (let kill = 1; kill <= KILLS; kill++) {
    await waitForSucceeded(Math.floor((JOBS * kill) / (KILLS + 1)));
    await node.kill('SIGKILL');
    node = await startDocketProcess({ server: server.url, dataDir });
  }

  await waitForSucceeded(JOBS);
  for (const worker of workers) await worker.close();
  const progress = (await client.progress(queue))[0]!;
  await node.kill('SIGTERM');

  // Every job's chain ended succeeded: crash-recovered runs were re-leased and completed by their
  // worker, or lapsed (a claim whose reply died with the node) and were retried as new jobs.
  expect(progress.counts.succeeded).toBe(JOBS);
  expect(progress.counts.running + progress.counts.queued + progress.counts.waiting).toBe(0);
  expect(handled).toBeGreaterThanOrEqual(JOBS);

  // From the log: every event is legal for its machines, and no job ever had two open runs.
  const log = await readWholeLog(client);
  const states = new Map<string, JobState>();
  let claims = 0;
  for (const { seq, subject, event } of log) {
    const before = states.get(subject) ?? INITIAL_JOB_STATE;
    if (event.type === 'job.claimed') {
      claims += 1;
      expect(before.run.value, `seq ${seq}: a second run claimed ${subject} while one was open`).not.toBe('running');
    }
    const after = evolveJob(before, event);
    expect(after, `seq ${seq}: ${event.type} refused on ${subject}`).not.toBeNull();
    states.set(subject, after!);
  }
  expect(claims).toBeGreaterThanOrEqual(JOBS);
  // Each failure has its retry, and each chain has exactly one success.
  const retried = new Set(log.filter((e) => e.event.type === 'job.submitted' && e.event.data.retry_of !== null).map((e) => (e.event.data as { retry_of: string }).retry_of));
  for (const [subject, state] of states) {
    if (state.job.value === 'failed') expect(retried.has(state.job.context.job_id), `${subject} failed without a retry`).toBe(true);
  }
  expect(retried.size).toBe(progress.counts.failed);
  expect(log.length).toBeGreaterThanOrEqual(3 * JOBS);
  await succeededEvents.return?.(undefined);
  await client.close();
});
