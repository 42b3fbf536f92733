/**
 * Flow control's cost (issue 17, Performance): end to end at worker concurrency 100, the jobs
 * spread over 1,000 concurrency_keys, with `key_concurrency: 1` set on the queue
 * (docket.cmd.queue.set, create: true, before the first submit) beside the same jobs on a queue
 * without limits, measured side by side in one run (the harness rotates their order). Both runs
 * carry the keys, so the only difference is the limit the dispatcher enforces: skipping the jobs
 * of held keys and asking the FlowGate about each job it looks at.
 */
import { NotAvailableError, type Group } from '../lib/harness.js';
import type { BenchEnv } from '../lib/env.js';
import { docketEndToEnd } from './workloads.js';

export const FLOW_KEYS = 1_000;
export const FLOW_CONCURRENCY = 100;

export function flowControlGroup(env: BenchEnv): Group {
  const n = env.config.jobs;
  const { chunk } = env.config;
  const queue = 'flow';
  return {
    name: 'flow_control',
    systems: {
      limited: () =>
        docketEndToEnd(env, {
          queue,
          jobs: n,
          concurrency: FLOW_CONCURRENCY,
          chunk,
          keys: FLOW_KEYS,
          prepare: async (client) => {
            if (!client.setQueue) throw new NotAvailableError('Client.setQueue (docket.cmd.queue.set) does not exist yet');
            const view = (await client.setQueue(queue, { key_concurrency: 1, create: true })) as { settings?: { key_concurrency?: number | null } };
            // A setting the node did not take would measure the unlimited run twice.
            if (view.settings?.key_concurrency !== 1) throw new Error(`queue.set answered ${JSON.stringify(view)}: key_concurrency is not 1`);
          },
        }),
      unlimited: () => docketEndToEnd(env, { queue, jobs: n, concurrency: FLOW_CONCURRENCY, chunk, keys: FLOW_KEYS }),
    },
    rows: [
      {
        scenario: 'flow_control.key_concurrency',
        title: `end to end, ${n.toLocaleString('en-US')} no-op jobs over ${FLOW_KEYS.toLocaleString('en-US')} concurrency keys, worker concurrency ${FLOW_CONCURRENCY}, key_concurrency 1 against no limits`,
        unit: 'jobs/s',
        better: 'higher',
        docket: 'limited.rate',
        peer: 'unlimited.rate',
        peerLabel: 'docket, same jobs, no limits',
        target: { on: 'ratio', op: '>=', limit: 0.8, text: '≥ 0.80× of no limits' },
        note: 'job i carries concurrency_key `k{hash(i) mod 1000}` (bench/lib/workload.ts jobKey); both runs in one bench run, order rotated per repetition',
      },
    ],
  };
}
