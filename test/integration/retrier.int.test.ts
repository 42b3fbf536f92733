/**
 * The retrier when the append of a retry fails: the stream refuses it for a while (a limit with
 * discard new, as an operator might set), and the failed job must still get its retry once the
 * stream takes appends again, without a change of leader.
 */
import { DiscardPolicy, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Client } from '../../src/client/client.js';
import { STREAM } from '../../src/nats/subjects.js';
import type { DocketNode } from '../../src/node.js';
import { closeTestFile, connectTestClients, loggerWatchingFor, startTrackedNode, uniqueQueue } from '../support/docket.js';
import { startNatsServer, type TestNatsServer } from '../support/nats-server.js';
import { claim, fail, untilRetryOf } from '../support/worker-helpers.js';

let server: TestNatsServer;
let client: Client;
let nc: NatsConnection;
let jsm: JetStreamManager;
let node: DocketNode;
const { logger, logged: retryRefused } = loggerWatchingFor(/retry not created/, 'info');

beforeAll(async () => {
  server = await startNatsServer();
  node = await startTrackedNode(server, { nodeName: 'retrier', logger });
  ({ client, nc, jsm } = await connectTestClients(server, 'retrier-test'));
});

afterAll(async () => {
  await closeTestFile({ client, nc, nodes: [node], server });
});

test('a retry whose append the stream refused is created once the stream takes appends again', async ({ task }) => {
  const queue = uniqueQueue(task.name);
  const { job_id: jobId } = await client.submit({ queue, max_attempts: 2 });
  const [run] = await claim(nc, queue);
  const { config, state } = await jsm.streams.info(STREAM);
  // Room for the failure, none for its retry.
  await jsm.streams.update(STREAM, { ...config, max_msgs: state.messages + 1, discard: DiscardPolicy.New });
  expect((await fail(nc, queue, run!, { message: 'boom' })).ok).toBe(true);
  await retryRefused;
  await jsm.streams.update(STREAM, { ...config, max_msgs: -1, discard: DiscardPolicy.Old });
  const retry = await untilRetryOf(node, jobId, 15_000);
  expect(retry.state.job.context).toMatchObject({ retry_of: jobId, attempt: 2 });
});
