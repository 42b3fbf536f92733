/**
 * The latency loop of `npm run bench`'s latency rows, for the diagnostic scripts: a client
 * submits one job, a Worker at concurrency 1 runs it, and a watcher waits for its job.succeeded
 * on the live events before the next submit (bench/latency-probe.ts, bench/latency-waits.ts).
 */
import { Client } from '../../src/client/client.js';
import { Worker } from '../../src/client/worker.js';

export interface LatencyTimes {
  /** Submit → job.succeeded seen, per job, ms. */
  readonly total: number[];
  /** The submit's own round trip, per job, ms. */
  readonly submit: number[];
}

export class LatencyLoop {
  private readonly waiting = new Map<string, () => void>();
  private readonly early = new Set<string>();
  private readonly abort = new AbortController();
  private submitted = 0;

  private constructor(
    private readonly client: Client,
    private readonly watcher: Client,
    private readonly worker: Worker,
  ) {}

  /** Connects a client, a watcher and a Worker on `queue` to the NATS at `servers`, and waits until the watcher listens. */
  static async start(servers: string, queue = 'lat'): Promise<LatencyLoop> {
    const client = await Client.connect({ servers });
    const watcher = await Client.connect({ servers });
    const worker = new Worker({ servers, queue, concurrency: 1, handler: async () => null });
    await worker.start();
    const loop = new LatencyLoop(client, watcher, worker);
    const events = watcher.live({ queue, types: ['job.succeeded'], signal: loop.abort.signal });
    await events.ready;
    void (async () => {
      for await (const e of events) {
        const resolve = loop.waiting.get(e.aggregate.id);
        if (resolve) resolve();
        else loop.early.add(e.aggregate.id);
      }
    })().catch(() => undefined);
    return loop;
  }

  /** Runs `jobs` jobs one after another on `queue`. */
  async run(jobs: number, queue = 'lat'): Promise<LatencyTimes> {
    const total: number[] = [];
    const submit: number[] = [];
    for (let i = 0; i < jobs; i++) {
      const t0 = performance.now();
      const { job_id } = await this.client.submit({ queue, params: { i: this.submitted++ } });
      submit.push(performance.now() - t0);
      if (!this.early.delete(job_id)) {
        await new Promise<void>((resolve) => this.waiting.set(job_id, resolve));
        this.waiting.delete(job_id);
      }
      total.push(performance.now() - t0);
    }
    return { total, submit };
  }

  async close(): Promise<void> {
    this.abort.abort();
    await this.worker.close();
    await this.client.close();
    await this.watcher.close();
  }
}

/** The nearest-rank percentile of a sample, in ms with two decimals. */
export function percentileMs(xs: readonly number[], p: number): string {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!.toFixed(2);
}
