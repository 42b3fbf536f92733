/** Workload sizes. `--quick` divides every job count by 10 (a smoke run in under two minutes). */
export interface BenchConfig {
  readonly quick: boolean;
  /** Bulk submit and end-to-end jobs per run (100,000). */
  readonly jobs: number;
  /** End-to-end jobs per run at concurrency 1: a fifth of `jobs`, or c=1 alone would take ~10 minutes. */
  readonly jobsAtConcurrency1: number;
  /** Appends per run in the substrate rows. */
  readonly appends: number;
  /** Jobs in the fold log; 8 events each (125,000 -> 1,000,000 events). */
  readonly foldJobs: number;
  /** Events folded with XState's exported transition() for the reference row (it is ~10x slower). */
  readonly xstateEvents: number;
  /** Sequential submit -> completed round trips. */
  readonly latencyJobs: number;
  /**
   * Round trips before the measured ones, alike for every system: the rows are a serving
   * process's latency, not its first jobs'. A node serves for days; in its first ~2,000 jobs
   * after a start, V8 has not yet optimised its job path (`WARMUP=<n> BENCH_NODE_DIST=1 npx tsx
   * bench/latency-probe.ts 1000 --node-process`: after 20 warm-up jobs p50 1.70 ms, p99 7.0-7.6;
   * after 2,000-3,000, 1.14-1.17 and 2.8-3.4). The first `latencyJobs` of the warm-up are kept as
   * cold_p50 / cold_p99 in the JSON.
   */
  readonly latencyWarmup: number;
  /** Jobs queued for the memory, restart and large-queue claim rows (1,000,000). */
  readonly largeQueue: number;
  /** The small queue of the claim row. */
  readonly smallQueue: number;
  /** Jobs completed per claim-throughput run. */
  readonly claimJobs: number;
  /**
   * Time allowed for filling the large queue. A node that slows down as its queue grows stops
   * there and the large-queue rows are measured at the size reached (reported as `queued`).
   */
  readonly fillBudgetMs: number;
  /** Batch size of bulk submits (BullMQ addBulk and docket submitBatch alike). */
  readonly chunk: number;
}

export function benchConfig(quick: boolean): BenchConfig {
  const d = quick ? 10 : 1;
  return {
    quick,
    jobs: 100_000 / d,
    jobsAtConcurrency1: 20_000 / d,
    appends: 100_000 / d,
    foldJobs: 125_000 / d,
    xstateEvents: 50_000 / d,
    latencyJobs: 1_000 / d,
    latencyWarmup: 3_000 / d,
    largeQueue: 1_000_000 / d,
    smallQueue: 1_000,
    claimJobs: 1_000,
    fillBudgetMs: quick ? 45_000 : 180_000,
    chunk: 1_000,
  };
}
