/**
 * `npx tsx bench/e2e-commits.ts [jobs] [concurrency]`: end to end in one process (nats-server,
 * node, client and an SDK Worker with a no-op handler), counting what log v2 batches: the commits
 * stored, events per commit, and the worker requests the node served (single and batch
 * completions). Throughput here is not comparable with `npm run bench` (one process, no peers).
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { Client } from '../src/client/client.js';
import { Worker } from '../src/client/worker.js';
import { WorkService } from '../src/dispatch/work-service.js';
import { startNode } from '../src/node.js';
import { startNatsServer } from '../test/support/nats-server.js';

const n = Number(process.argv[2] ?? 20_000);
const concurrency = Number(process.argv[3] ?? 100);

// Counts the requests the node serves, by verb and form (a private method, wrapped for counting).
const requests: Record<string, number> = {};
const service = WorkService.prototype as unknown as { handle(queue: string, verb: string, body: unknown): Promise<unknown> };
const handle = service.handle;
service.handle = function (this: unknown, queue, verb, body) {
  const form = body !== null && typeof body === 'object' && 'runs' in body ? `${verb} (batch)` : verb;
  requests[form] = (requests[form] ?? 0) + 1;
  return handle.call(this, queue, verb, body);
};

const server = await startNatsServer();
const node = await startNode({ servers: server.url });
const client = await Client.connect({ servers: server.url });
let handled = 0;
let allHandled!: () => void;
const done = new Promise<void>((resolve) => (allHandled = resolve));
const worker = new Worker({ servers: server.url, queue: 'e2e', concurrency, handler: () => (++handled === n ? allHandled() : undefined) ?? null });
await worker.start();
const started = performance.now();
for (let offset = 0; offset < n; offset += 1_000) {
  await client.submitBatch(Array.from({ length: Math.min(1_000, n - offset) }, (_, i) => ({ queue: 'e2e', params: { i: offset + i } })));
}
await done;
while (worker.counts.succeeded < n) await new Promise((r) => setTimeout(r, 5));
const seconds = (performance.now() - started) / 1000;
const { state } = await (await jetstreamManager(client.nc)).streams.info('DOCKET');
process.stdout.write(
  `${n} jobs at concurrency ${concurrency}: ${Math.round(n / seconds)} jobs/s in one process; ` +
    `${state.messages} commits for ${3 * n} events (${((3 * n) / state.messages).toFixed(1)} per commit); requests ${JSON.stringify(requests)}\n`,
);
await worker.close();
await client.close();
await node.close();
await server.stop();
