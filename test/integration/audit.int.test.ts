/**
 * Replay and audit against a real nats-server (issue 4, log v2 in issue 11): the audit of a real
 * run (a node, workers, failures and retries) is clean; replay at a sequence equals the live
 * projection a follower's tail held at that sequence; each kind of tampered log, built by
 * publishing raw commits with docket's headers and hash chain, fails the audit with its rule and
 * names the event; `Client.events()` unpacks commits with each event's position; and the commands
 * as a subprocess (exit codes, --json).
 *
 * One server for the file; each test takes its own queue and audits that queue's partition.
 */
import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { positionOf } from '../../machines/index.js';
import { auditMessages, decodeStoredCommit, QueueReplay, type AuditReport, type QueueView, type RecordedMessage } from '../../src/audit/index.js';
import type { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';
import { NonRetryableJobError } from '../../src/errors.js';
import { retryJobId } from '../../src/ids.js';
import { silentLogger } from '../../src/logger.js';
import { STREAM } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { Progress } from '../../src/projections/progress.js';
import { QueueOrder } from '../../src/projections/queue-order.js';
import { JobStore } from '../../src/store/job-store.js';
import { LogTail } from '../../src/store/log-tail.js';
import { approxReadBytes, logFilter, readLog, readLogPacked, toLogMessage } from '../../src/store/read-log.js';
import { PackWriter, unpack } from '../../src/audit/packed.js';
import { auditLog } from '../../src/cli/audit-commands.js';
import { History, publishHistory, uniqueQueue } from '../support/audit-log.js';
import { startTrackedNode, closeTestFile, connectTestClients } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'audit-node' });
  ({ client, nc, jsm } = await connectTestClients(server, 'audit-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

async function queueMessages(queue: string, toSeq?: number): Promise<RecordedMessage[]> {
  const out: RecordedMessage[] = [];
  for await (const m of readLog(nc, { filter: logFilter(queue), ...(toSeq === undefined ? {} : { toSeq }) })) out.push(m);
  return out;
}

async function auditQueue(queue: string): Promise<AuditReport> {
  return auditMessages(await queueMessages(queue));
}

interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function cli(...args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      'node_modules/.bin/tsx',
      ['test/support/audit-cli.ts', ...args, '--server', server.url],
      { cwd: process.cwd(), env: { ...process.env, NATS_URL: '' }, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('the log reader', () => {
  test('gives every commit with its stored headers and time, bounded and filtered by partition', async () => {
    const queue = uniqueQueue('reader');
    const h = new History('rd', Date.now());
    h.succeeding(queue, 'j1');
    h.submit(queue, 'j2');
    h.claim('j2', {}, { expected: null });
    const seqs = await publishHistory(nc, h.entries);
    const all = await queueMessages(queue);
    expect(all.map((m) => m.seq)).toEqual(seqs);
    expect(all.map((m) => m.subject)).toEqual(seqs.map(() => `docket.log.q.${queue}`));
    // The commit id is the Nats-Msg-Id; one partition, so each commit expects the one before.
    expect(all.map((m) => m.msgId)).toEqual(all.map((m) => (JSON.parse(Buffer.from(m.data).toString('utf8')) as { commit: string }).commit));
    expect(all.map((m) => m.expectedLastSubjectSeq)).toEqual([0, seqs[0], seqs[1], seqs[2], seqs[3], null]);
    expect(all.every((m) => Math.abs(m.time - Date.now()) < 60_000)).toBe(true);
    const middle = [];
    for await (const m of readLog(nc, { filter: logFilter(queue), fromSeq: seqs[1]!, toSeq: seqs[3]! })) middle.push(m.seq);
    expect(middle).toEqual(seqs.slice(1, 4));
    // The fast header path reads what nats.js's own header parser reads.
    const { jetstream, DeliverPolicy } = await import('@nats-io/jetstream');
    const consumer = await jetstream(nc).consumers.get(STREAM, { filter_subjects: logFilter(queue), deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: seqs[0]! });
    const m = await consumer.next();
    expect(m).not.toBeNull();
    expect(toLogMessage(m!, true)).toEqual(toLogMessage(m!, false));
  });

  test('packed reading pauses for a slow sink and resumes where it stopped: every message once, in order', async () => {
    const queue = uniqueQueue('packed');
    const h = new History('pk', Date.now());
    for (let i = 0; i < 400; i++) h.succeeding(queue, `j${i}`);
    const seqs = await publishHistory(nc, h.entries);
    const seen: number[] = [];
    let backlog = 0;
    let pauses = 0;
    const sink = {
      write(buffer: ArrayBuffer) {
        backlog += 1;
        unpack(buffer, (m) => seen.push(m.seq));
      },
      get backlog() {
        return backlog;
      },
      async whenBelow(n: number) {
        if (backlog < n) return;
        pauses += 1;
        await new Promise((resolve) => setTimeout(resolve, 5));
        backlog = 0;
      },
    };
    const count = await readLogPacked(nc, { filter: logFilter(queue) }, sink, (flush) => new PackWriter(flush, 2048));
    expect(count).toBe(seqs.length);
    expect(seen).toEqual(seqs);
    expect(pauses).toBeGreaterThan(2);
  });

  test('an empty filter reads nothing and returns', async () => {
    const none = [];
    for await (const m of readLog(nc, { filter: logFilter(uniqueQueue('empty')) })) none.push(m);
    expect(none).toEqual([]);
  });
});

describe('Client.events() reads the commits and unpacks them', () => {
  test('each event with its commit sequence, index, position and live subject; from a sequence or a position', async () => {
    const queue = uniqueQueue('events');
    const h = new History('ev', Date.now());
    h.submit(queue, 'j1');
    h.together(() => {
      h.submit(queue, 'j2');
      h.claim('j1');
      h.cancel('j2');
    });
    const seqs = await publishHistory(nc, h.entries);
    expect(seqs[1]).toBe(seqs[3]);
    const read = async (from: number | { seq: number; index: number }, n: number) => {
      const it = client.events({ queue, from })[Symbol.asyncIterator]();
      const out = [];
      while (out.length < n) {
        const next = await it.next();
        if (next.done) break;
        out.push(next.value);
      }
      await it.return?.(undefined);
      return out;
    };
    const all = await read(seqs[0]!, 4);
    expect(all.map((e) => [e.seq, e.index, e.position, e.event.type, e.subject])).toEqual([
      [seqs[0], 0, positionOf(seqs[0]!, 0), 'job.submitted', `docket.evt.job.${queue}.j1`],
      [seqs[1], 0, positionOf(seqs[1]!, 0), 'job.submitted', `docket.evt.job.${queue}.j2`],
      [seqs[1], 1, positionOf(seqs[1]!, 1), 'job.claimed', `docket.evt.job.${queue}.j1`],
      [seqs[1], 2, positionOf(seqs[1]!, 2), 'job.cancelled', `docket.evt.job.${queue}.j2`],
    ]);
    const fromPosition = await read({ seq: seqs[1]!, index: 1 }, 2);
    expect(fromPosition.map((e) => [e.seq, e.index])).toEqual([
      [seqs[1], 1],
      [seqs[1], 2],
    ]);
    const cancels = client.events({ queue, from: seqs[0]!, types: ['job.cancelled'] })[Symbol.asyncIterator]();
    const cancel = await cancels.next();
    await cancels.return?.(undefined);
    expect(cancel.value).toMatchObject({ seq: seqs[1], index: 2, event: { type: 'job.cancelled', aggregate: { kind: 'job', id: 'j2' } } });
  });
});

describe('a real run', () => {
  test('audits clean, and replay at each captured sequence equals the live projection then', async () => {
    const queue = uniqueQueue('real-run');
    // A follower's view: the same tail and projections every node keeps, fed by the stream only.
    const store = new JobStore();
    // The capture's clock is read once and used for both the live snapshot and the replay.
    let captureMs: number | undefined;
    const order = new QueueOrder(() => captureMs ?? Date.now(), (jobId) => store.get(jobId));
    const progress = new Progress();
    store.onChange(order.apply);
    store.onChange(progress.apply);
    const tail = new LogTail(nc, store, silentLogger, 1);
    await tail.start();

    interface Capture {
      readonly seq: number;
      readonly atMs: number;
      readonly ready: string[];
      readonly delayed: string[];
      readonly running: string[];
      readonly counts: unknown;
    }
    const captures: Capture[] = [];
    const capture = () => {
      // Synchronous: the tail's position and the projections are read in one turn.
      captureMs = Date.now();
      const snapshot = order.snapshot(queue);
      const running = [...store.values()].filter((r) => r.queue === queue && r.state.job.value === 'running').map((r) => r.jobId).sort();
      captures.push({ seq: tail.position, atMs: captureMs, ready: snapshot.ready, delayed: snapshot.delayed.map((d) => d.jobId), running, counts: progress.of(queue).counts });
      captureMs = undefined;
    };
    const sampler = setInterval(capture, 15);

    const worker = new Worker({
      servers: server.url,
      queue,
      concurrency: 3,
      leaseMs: 5_000,
      claimWaitMs: 500,
      handler: (job) => {
        const p = job.params as { fail?: boolean; fatal?: boolean };
        if (p.fatal) throw new NonRetryableJobError('cannot be done');
        if (p.fail && job.attempt < 3) throw new Error(`failing attempt ${job.attempt}`);
        return { done: job.job_id };
      },
    });
    await worker.start();
    const backoff = { base_ms: 20, max_ms: 50, jitter: 0 };
    const specs = Array.from({ length: 30 }, (_, i) => ({
      queue,
      priority: i % 4,
      params: { i, ...(i % 5 === 0 ? { fail: true } : {}), ...(i === 7 ? { fatal: true } : {}) },
      max_attempts: 3,
      backoff,
    }));
    const later = Array.from({ length: 4 }, (_, i) => ({ queue, params: { later: i }, delay_ms: 3_600_000 }));
    const reply = await client.submitBatch([...specs, ...later]);
    const delayedIds = reply.jobs.slice(specs.length).map((j) => (j.ok ? j.job_id : ''));
    await client.cancel(delayedIds[0]!);

    // Done when every non-delayed chain has ended: 30 firsts, 6 failing chains with 2 retries each.
    await new Promise<void>((resolve) => {
      const check = () => {
        const c = progress.of(queue).counts;
        if (c.succeeded === 29 && c.failed === 13 && c.running === 0) resolve();
      };
      store.onChange(check);
      check();
    });
    await worker.close();
    clearInterval(sampler);
    capture();
    await tail.stop();

    const messages = await queueMessages(queue);
    const report = auditMessages(messages);
    expect(report.violations).toEqual([]);
    expect(report.jobs).toBe(34 + 12);
    const retries = messages.flatMap((m) => {
      const decoded = decodeStoredCommit(m);
      return decoded.ok ? decoded.events.filter((e) => e.kind === 'job' && e.event.type === 'job.submitted' && e.event.data.retry_of !== null) : [];
    });
    expect(retries).toHaveLength(12);

    // Replay up to each captured sequence, with the capture's clock.
    const distinct = captures.filter((c, i) => c.seq > 0 && (i === 0 || c.seq !== captures[i - 1]!.seq));
    expect(distinct.length).toBeGreaterThan(3);
    const replay = new QueueReplay(queue, 0);
    let next = 0;
    const compare = (c: Capture, view: QueueView) => {
      expect({ seq: c.seq, ready: view.ready.map((r) => r.job_id), delayed: view.delayed.map((d) => d.job_id), running: view.running.map((r) => r.job_id).sort(), counts: view.progress.counts }).toEqual({
        seq: c.seq,
        ready: c.ready,
        delayed: c.delayed,
        running: c.running,
        counts: c.counts,
      });
    };
    // Captures are in seq order (the tail applies whole commits); other queues' commits in between are skipped by the filter.
    for (const m of messages) {
      while (next < distinct.length && distinct[next]!.seq < m.seq) {
        replay.atMs = distinct[next]!.atMs;
        compare(distinct[next]!, { ...replay.view(), seq: distinct[next]!.seq });
        next += 1;
      }
      replay.push(m);
    }
    for (; next < distinct.length; next++) {
      replay.atMs = distinct[next]!.atMs;
      compare(distinct[next]!, { ...replay.view(), seq: distinct[next]!.seq });
    }

    // The command, as a subprocess, at a sequence in the middle of the run (its clock is the
    // stored time of that sequence, so compare what does not depend on the clock).
    const mid = distinct[Math.floor(distinct.length / 2)]!;
    const out = await cli('replay', '--queue', queue, '--at', String(mid.seq), '--json');
    expect(out.code).toBe(0);
    const { view } = JSON.parse(out.stdout) as { view: QueueView };
    expect(view.seq).toBe(mid.seq);
    expect(view.progress.counts).toEqual(mid.counts);
    expect(view.running.map((r) => r.job_id).sort()).toEqual(mid.running);
    expect([...view.ready.map((r) => r.job_id), ...view.delayed.map((d) => d.job_id)].sort()).toEqual([...mid.ready, ...mid.delayed].sort());

    // The reader handing packed batches to an audit on a worker thread finds the same.
    const threaded = await auditLog(nc, { queue, thread: true });
    expect(threaded.mode).toBe('thread');
    expect(threaded.report).toEqual(auditMessages(messages, { maxViolations: 1000 }));
    // Left to choose (`--thread auto`), a read this small is audited inline, with the same report.
    const chosen = await auditLog(nc, { queue });
    expect(chosen.mode).toBe('inline');
    expect(chosen.report).toEqual(threaded.report);
    // What `auto` weighs: the stream's mean stored message times the messages read.
    const { state } = await jsm.streams.info(STREAM);
    const whole = { fromSeq: state.first_seq, toSeq: state.last_seq };
    expect(await approxReadBytes(nc, whole)).toBeCloseTo((state.bytes / state.messages) * Math.min(state.messages, state.last_seq - state.first_seq + 1), 3);
    // auditLog reads from sequence 1: what is stored counts, not the sequences (deleted or purged).
    expect(await approxReadBytes(nc, { fromSeq: 1, toSeq: state.last_seq })).toBeCloseTo(state.bytes, 0);
    expect(await approxReadBytes(nc, whole, logFilter(queue))).toBeCloseTo((state.bytes / state.messages) * messages.length, 3);

    // And the audit command over the same queue.
    const audit = await cli('audit', '--queue', queue, '--json');
    expect(audit.code).toBe(0);
    expect(JSON.parse(audit.stdout)).toMatchObject({ ok: true, violationCount: 0, messages: messages.length });

    // replay --job from the middle of a retry chain, and explain of a job that ran.
    const failing = reply.jobs[5]!;
    expect(failing.ok).toBe(true);
    const first = failing.ok ? failing.job_id : '';
    const second = retryJobId(first, 1);
    const job = await cli('replay', '--job', second, '--json');
    expect(job.code).toBe(0);
    const parsed = JSON.parse(job.stdout) as { chain: { job_id: string; attempt: number; status: string }[]; retry_of: string; retried_by: string };
    expect(parsed.chain.map((l) => [l.attempt, l.status])).toEqual([
      [1, 'failed'],
      [2, 'failed'],
      [3, 'succeeded'],
    ]);
    expect(parsed.retry_of).toBe(first);
    expect(parsed.retried_by).toBe(retryJobId(second, 2));
    const explain = await cli('explain', first, '--json');
    expect(explain.code).toBe(0);
    const e = JSON.parse(explain.stdout) as { claim: { worker: string; seq: number } | null; order_key: { priority: number }; retries: unknown[] };
    expect(e.claim?.worker).toBe(worker.id);
    expect(e.order_key.priority).toBe(1);
    expect(e.retries).toHaveLength(3);
  });
});

describe('each tampered log fails the audit with its rule and names the event', () => {
  /** Publishes a legal prefix and the tampering; returns the audit of the queue and the seqs. */
  async function tampered(label: string, build: (h: History, queue: string) => void): Promise<{ report: AuditReport; seqs: number[]; h: History }> {
    const queue = uniqueQueue(label);
    const h = new History(label, Date.now() - 60_000);
    h.succeeding(queue, 'ok'); // a clean neighbour on the same queue
    build(h, queue);
    const seqs = await publishHistory(nc, h.entries);
    return { report: await auditQueue(queue), seqs, h };
  }

  test('job.succeeded for a job that was never claimed, published by hand with correct headers', async () => {
    const { report, seqs, h } = await tampered('illegal', (h, q) => {
      h.submit(q, 'j1');
      h.event('j1', 'job.succeeded', { run_id: 'forged', result: null });
    });
    const forged = h.entries[h.entries.length - 1]!.event as { id: string };
    expect(report.violations).toHaveLength(1);
    expect(report.violations[0]).toMatchObject({ seq: seqs[seqs.length - 1], index: 0, rule: 'illegal_transition', aggregate: 'job:j1', events: [{ seq: seqs[seqs.length - 1], index: 0 }] });
    expect(report.violations[0]!.message).toContain(forged.id);
  });

  test('an out-of-order event: appended without the expected sequence', async () => {
    const { report, seqs } = await tampered('unguarded', (h, q) => {
      h.submit(q, 'j1');
      h.claim('j1', {}, { expected: null });
    });
    expect(report.violations.map((v) => [v.seq, v.rule])).toEqual([[seqs[seqs.length - 1], 'unguarded_append']]);
  });

  test('a commit removed from the middle of a partition: the gap and the broken hash chain are found at the next one', async () => {
    const queue = uniqueQueue('gap');
    const h = new History('gap', Date.now() - 60_000);
    h.succeeding(queue, 'j1');
    const seqs = await publishHistory(nc, h.entries);
    expect(await jsm.streams.deleteMessage(STREAM, seqs[1]!)).toBe(true); // the claim
    const report = await auditQueue(queue);
    expect(report.violations.map((v) => [v.seq, v.rule])).toEqual([
      [seqs[2], 'sequence_gap'],
      [seqs[2], 'hash_chain'],
      // Without its claim, the run's events are refused too: named as what they now are.
      [seqs[2], 'illegal_transition'],
      [seqs[3], 'illegal_transition'],
    ]);
  });

  test('a double close', async () => {
    const { report, seqs } = await tampered('double-close', (h, q) => {
      h.submit(q, 'j1');
      h.claim('j1');
      h.succeed('j1');
      h.fail('j1');
    });
    const n = seqs.length;
    expect(report.violations).toEqual([expect.objectContaining({ seq: seqs[n - 1], rule: 'double_close', events: [{ seq: seqs[n - 2], index: 0 }, { seq: seqs[n - 1], index: 0 }] })]);
  });

  test('a completion by a stale run', async () => {
    const { report, seqs } = await tampered('stale', (h, q) => {
      h.submit(q, 'j1');
      h.claim('j1', { runId: 'r-current' });
      h.succeed('j1', { runId: 'r-old' });
    });
    const n = seqs.length;
    expect(report.violations).toEqual([expect.objectContaining({ seq: seqs[n - 1], rule: 'stale_run', events: [{ seq: seqs[n - 2], index: 0 }, { seq: seqs[n - 1], index: 0 }] })]);
    expect(report.violations[0]!.message).toContain('r-current holds the job');
  });

  test('a broken retry chain', async () => {
    const { report, seqs } = await tampered('retry-chain', (h, q) => {
      h.submit(q, 'j1', { maxAttempts: 5 });
      h.claim('j1');
      h.fail('j1');
      h.retry('j1', { attempt: 3 }); // skips attempt 2
      h.submit(q, 'j9', { retryOf: 'never-existed', attempt: 2 });
    });
    const n = seqs.length;
    expect(report.violations.map((v) => [v.seq, v.rule])).toEqual([
      [seqs[n - 2], 'retry_chain'],
      [seqs[n - 1], 'retry_chain'],
    ]);
  });

  test('a commit that does not chain to the one before it, and a deposed writer\'s commit', async () => {
    const { report, seqs } = await tampered('chain', (h, q) => {
      h.submit(q, 'j1', {}, { epoch: 5 });
      h.claim('j1', {}, { prevHash: 'ab'.repeat(32), epoch: 5 });
      h.succeed('j1', {}, { epoch: 4 });
    });
    const n = seqs.length;
    expect(report.violations.map((v) => [v.seq, v.index, v.rule])).toEqual([
      [seqs[n - 2], null, 'hash_chain'],
      [seqs[n - 1], null, 'writer_epoch'],
    ]);
  });

  test('an illegal event inside a commit of many is named by its index', async () => {
    const { report, seqs } = await tampered('in-commit', (h, q) => {
      h.together(() => {
        h.submit(q, 'j1');
        h.claim('j1', { runId: 'r1' });
        h.claim('j1', { runId: 'r2' });
      });
    });
    const n = seqs.length;
    expect(seqs[n - 1]).toBe(seqs[n - 3]);
    expect(report.violations).toEqual([expect.objectContaining({ seq: seqs[n - 1], index: 2, rule: 'two_open_runs', events: [{ seq: seqs[n - 1], index: 1 }, { seq: seqs[n - 1], index: 2 }] })]);
  });

  test('two open runs, and a claim before run_at', async () => {
    const { report, seqs } = await tampered('runs', (h, q) => {
      h.submit(q, 'j1');
      h.claim('j1', { runId: 'a' });
      h.claim('j1', { runId: 'b' });
      h.submit(q, 'j2', { delayMs: 3_600_000 });
      h.claim('j2', { time: new Date(h.nowMs + 1).toISOString() });
    });
    const n = seqs.length;
    expect(report.violations.map((v) => [v.seq, v.rule])).toEqual([
      [seqs[n - 3], 'two_open_runs'],
      [seqs[n - 1], 'claimed_before_run_at'],
    ]);
  });

  test('the commands as a subprocess: exit 1 and the violation in --json and in the table', async () => {
    const { seqs } = await tampered('cli', (h, q) => {
      h.submit(q, 'cli-j1');
      h.event('cli-j1', 'job.succeeded', { run_id: 'forged', result: null });
    });
    const forgedSeq = seqs[seqs.length - 1]!;
    const queue = (await jsm.streams.getMessage(STREAM, { seq: forgedSeq }))!.subject.slice('docket.log.q.'.length);
    const json = await cli('audit', '--queue', queue, '--json');
    expect(json.code).toBe(1);
    const report = JSON.parse(json.stdout) as AuditReport;
    expect(report.ok).toBe(false);
    expect(report.violations).toEqual([expect.objectContaining({ seq: forgedSeq, rule: 'illegal_transition' })]);
    const human = await cli('audit', '--queue', queue);
    expect(human.code).toBe(1);
    expect(human.stdout).toContain('1 violation');
    expect(human.stdout).toContain('illegal_transition');
    // Reported only within --from/--to; the fold still reads the whole queue.
    const after = await cli('audit', '--queue', queue, '--from', String(forgedSeq + 1), '--json');
    expect(after.code).toBe(0);
    // The whole log holds this file's tampering, so it fails too; alike with the fold on a worker
    // thread and on the reader's.
    const all = await cli('audit', '--json', '--thread', 'on');
    expect(all.code).toBe(1);
    const onThread = JSON.parse(all.stdout) as AuditReport & { mode: string; ms?: number; events_per_second?: number };
    expect(onThread.mode).toBe('thread');
    expect(onThread.violations.some((v) => v.seq === forgedSeq && v.rule === 'illegal_transition')).toBe(true);
    const inline = JSON.parse((await cli('audit', '--json', '--thread', 'off')).stdout) as typeof onThread;
    expect(inline.mode).toBe('inline');
    const strip = ({ ms: _ms, events_per_second: _rate, mode: _mode, ...rest }: typeof onThread) => rest;
    expect(strip(onThread)).toEqual(strip(inline));

    const exported = await cli('export', '--queue', queue, '--format', 'jsonl');
    expect(exported.code).toBe(0);
    const lines = exported.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => l['seq'])).toEqual(seqs);
    for (const line of lines) {
      expect(Object.keys(line)).toEqual(['seq', 'index', 'subject', 'stored_at', 'msg_id', 'expected_last_subject_seq', 'commit', 'writer', 'prev_hash', 'commit_hash', 'event']);
      expect(Object.keys(line['event'] as object)).toEqual(['id', 'type', 'time', 'aggregate', 'queue', 'data', 'meta']);
    }
    // The lines carry the chain: each commit names the hash of the one before it.
    for (let i = 1; i < lines.length; i++) expect(lines[i]!['prev_hash']).toBe(lines[i - 1]!['commit_hash']);
    const replay = await cli('replay', '--job', 'cli-j1', '--json');
    expect(replay.code).toBe(0);
    const events = (JSON.parse(replay.stdout) as { job: { events: { seq: number; accepted: boolean }[] } }).job.events;
    expect(events.map((ev) => ev.accepted)).toEqual([true, false]);

    const usage = await cli('replay', '--json');
    expect(usage.code).toBe(1);
    expect(JSON.parse(usage.stdout)).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    const missing = await cli('replay', '--job', 'no-such-job');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('not_found');
  });
});
