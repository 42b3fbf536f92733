/**
 * How long a worker waits when its queue's leader gives the queue up while the node stays up:
 * two nodes on one stream, a Worker of its own (concurrency 4, 10 ms jobs), 80 jobs; after 10
 * are handled the leader relinquishes the queue. Prints how long after the give-up the last job
 * finished (the jobs left need ~175 ms of handler time) and which node leads at the end.
 *
 *   npx tsx bench/failover-stall.ts [rounds=3]
 */
import { Worker } from '../src/client/worker.js';
import { closeTestFile, startTwoNodes } from '../test/support/docket.js';

const rounds = Number(process.argv[2] ?? 3);
const JOBS = 80;
const GIVE_UP_AFTER = 10;

for (let round = 0; round < rounds; round++) {
  const { server, a, b, client, nc } = await startTwoNodes(`stall-${round}`);
  const queue = `stall-${round}`;
  await client.submit({ queue });
  let handled = 0;
  let allDone!: () => void;
  const all = new Promise<void>((resolve) => (allDone = resolve));
  const worker = new Worker({
    servers: server.url,
    queue,
    concurrency: 4,
    handler: async () => {
      await new Promise((resolve) => setTimeout(resolve, 10));
      if (++handled === JOBS + 1) allDone();
      return null;
    },
  });
  await worker.start();
  await client.submitBatch(Array.from({ length: JOBS }, () => ({ queue })));
  while (handled < GIVE_UP_AFTER) await new Promise((resolve) => setTimeout(resolve, 1));
  const leader = a.leadership.isLeader(queue) ? a : b;
  const givenUpAt = performance.now();
  const handledAtGiveUp = handled;
  await leader.leadership.relinquish(queue);
  await all;
  const newLeader = a.leadership.isLeader(queue) ? a : b;
  console.log(JSON.stringify({ round, handled_at_give_up: handledAtGiveUp, last_job_ms_after_give_up: Math.round(performance.now() - givenUpAt), leader: newLeader.name }));
  await worker.close();
  await closeTestFile({ client, nc, nodes: [a, b], server });
}
process.exit(0);
