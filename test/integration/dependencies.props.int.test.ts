/**
 * Random dependency graphs and outcomes through a real node (issue 15, fast-check): jobs in two
 * queues, each naming some earlier jobs in depends_on, each run to success or failure as drawn.
 * Whatever the graph: a job is released only after every dependency succeeded (by position in the
 * one log), a job whose dependency failed is skipped naming a failed one, nothing is left waiting,
 * and the audit finds no violation.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Client } from '../../src/client/client.js';
import type { DocketNode } from '../../src/node.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, complete, fail } from '../support/worker-helpers.js';
import { closeTestFile, connectTestClients, request, startTrackedNode, uniqueQueue } from '../support/docket.js';

let server: TestNatsServer;
let node: DocketNode;
let client: Client;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'deps-props' });
  ({ client, nc } = await connectTestClients(server, 'deps-props-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

interface Drawn {
  readonly queue: 0 | 1;
  /** Indexes of earlier jobs. */
  readonly dependsOn: number[];
  readonly succeeds: boolean;
}

const graphArb = fc.array(fc.record({ queue: fc.constantFrom(0 as const, 1 as const), deps: fc.array(fc.nat(), { maxLength: 3 }), succeeds: fc.boolean() }), { minLength: 1, maxLength: 8 }).map((jobs) =>
  jobs.map((j, i): Drawn => ({ queue: j.queue, succeeds: j.succeeds, dependsOn: i === 0 ? [] : [...new Set(j.deps.map((d) => d % i))] })),
);

test('released only after every dependency succeeded, skipped when one failed, nothing left waiting', async () => {
  await fc.assert(
    fc.asyncProperty(graphArb, async (graph) => {
      const queues = [uniqueQueue('dag-a'), uniqueQueue('dag-b')] as const;
      const ids: string[] = [];
      for (const job of graph) {
        const reply = await request(nc, 'submit', { queue: queues[job.queue], ...(job.dependsOn.length > 0 ? { depends_on: job.dependsOn.map((d) => ids[d]) } : {}) });
        // A dependency that already failed for good is refused: such a job could never run.
        if (!reply.ok) {
          expect(reply.error.code).toBe('invalid_request');
          ids.push('');
          continue;
        }
        ids.push(reply['job_id'] as string);
      }
      const outcome = new Map(graph.map((job, i) => [ids[i]!, job.succeeds]));
      const ended = (id: string) => ['succeeded', 'failed', 'cancelled', 'skipped'].includes(node.store.get(id)?.state.job.value ?? '');
      // Work both queues until every submitted job has ended.
      for (let round = 0; round < 100 && !ids.filter(Boolean).every(ended); round++) {
        for (const queue of queues) {
          for (const job of await claim(nc, queue, { max: 10, wait_ms: 50 })) {
            if (outcome.get(job.job_id)) await complete(nc, queue, job);
            else await fail(nc, queue, job, { message: 'drawn to fail' });
          }
        }
      }
      for (const [i, id] of ids.entries()) {
        if (id === '') continue;
        const record = node.store.get(id)!;
        expect(record.state.job.value, `job ${i}`).not.toBe('waiting');
        const deps = (record.state.job.context.depends_on ?? []).map((d) => node.store.get(d)!);
        const released = record.later.find((h) => h.type === 'job.released');
        if (released) for (const dep of deps) expect(dep.state.job.value === 'succeeded' && dep.seq < released.seq, `job ${i} released before ${dep.jobId}`).toBe(true);
        if (record.state.job.value === 'skipped') expect(deps.some((d) => d.state.job.value !== 'succeeded'), `job ${i} skipped with every dependency succeeded`).toBe(true);
        if (record.state.job.value === 'succeeded' || record.state.job.value === 'failed') for (const dep of deps) expect(dep.state.job.value).toBe('succeeded');
      }
    }),
    { numRuns: Number(process.env.DOCKET_NUM_RUNS ?? 15) },
  );
  const { auditMessages } = await import('../../src/audit/index.js');
  const { readLog } = await import('../../src/store/read-log.js');
  const messages = [];
  for await (const m of readLog(nc, {})) messages.push(m);
  expect(auditMessages(messages).violations).toEqual([]);
}, 180_000);
