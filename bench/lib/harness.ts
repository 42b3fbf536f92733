/**
 * The shape every scenario shares: a group measures several systems (docket, BullMQ on AOF,
 * BullMQ in memory, raw JetStream) on one workload, three times, in a rotating order so that no
 * system always runs first on a noisy machine. Rows then pair a docket metric with its peer.
 * A system that cannot run (code not written yet, server missing) is "not available" with the
 * reason, and the harness carries on.
 */
import type { CpuSample } from './procs.js';
import { cpuBetween, round, sampleCpu, type ProcessRoles } from './procs.js';

/** Thrown by a system that cannot be measured here; the row says so instead of failing the run. */
export class NotAvailableError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'NotAvailableError';
  }
}

export interface CpuAccount {
  readonly wall_s: number;
  /** CPU seconds per process role (bench = this process) over the measured interval. */
  readonly cpu_s: Record<string, number>;
  /** Seconds each role's threads were runnable but waiting for a core (absent in runs before it was measured). */
  readonly wait_s?: Record<string, number>;
}

export interface Measurement {
  /** Named figures of one run, e.g. `{ rate: 21000 }` or `{ p50: 0.6, p99: 2.1 }`. */
  readonly values: Record<string, number>;
  readonly cpu?: CpuAccount;
  /** Several samples of a figure taken inside one run (the row uses them instead of `values`). */
  readonly samples?: Record<string, number[]>;
  /** Anything else worth keeping in the JSON (counts, settings). */
  readonly extra?: Record<string, unknown>;
}

export type SystemRun = (rep: number) => Promise<Measurement>;

export interface RowDef {
  readonly scenario: string;
  readonly title: string;
  readonly unit: string;
  readonly better: 'higher' | 'lower';
  /** `system.metric` of the docket figure. */
  readonly docket: string;
  /** `system.metric` of the peer figure; none for rows without a peer. */
  readonly peer?: string;
  readonly peerLabel?: string;
  /** Target on the docket figure (`value`) or on docket/peer (`ratio`). */
  readonly target?: { readonly on: 'value' | 'ratio'; readonly op: '>=' | '<='; readonly limit: number; readonly text: string };
  readonly note?: string;
}

export interface Group {
  readonly name: string;
  /** @defaultValue 3 */
  readonly reps?: number;
  readonly systems: Record<string, SystemRun>;
  readonly rows: readonly RowDef[];
  setup?(): Promise<void>;
  teardown?(): Promise<void>;
}

export interface SystemResult {
  readonly runs: (Measurement | null)[];
  unavailable?: string;
  error?: string;
}

export interface GroupResult {
  readonly name: string;
  readonly systems: Record<string, SystemResult>;
  readonly seconds: number;
}

export interface Log {
  (line: string): void;
}

/** Runs a group's systems `reps` times, rotating the order each repetition. */
export async function runGroup(group: Group, log: Log): Promise<GroupResult> {
  const started = performance.now();
  const names = Object.keys(group.systems);
  const results: Record<string, SystemResult> = {};
  for (const name of names) results[name] = { runs: [] };
  const reps = group.reps ?? 3;
  try {
    if (group.setup) await group.setup();
    for (let rep = 0; rep < reps; rep++) {
      for (let i = 0; i < names.length; i++) {
        const name = names[(i + rep) % names.length]!;
        const result = results[name]!;
        if (result.unavailable !== undefined || result.error !== undefined) continue;
        const t0 = performance.now();
        try {
          const m = await group.systems[name]!(rep);
          result.runs.push(m);
          log(`  ${group.name} ${name} #${rep + 1}: ${formatValues(m.values)} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
        } catch (err: unknown) {
          if (err instanceof NotAvailableError) {
            result.unavailable = err.message;
            log(`  ${group.name} ${name}: not available: ${err.message}`);
          } else {
            result.error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
            log(`  ${group.name} ${name}: ERROR ${result.error}`);
            if (err instanceof Error && err.stack && process.env['BENCH_DEBUG']) log(err.stack);
          }
        }
      }
    }
  } catch (err: unknown) {
    const message = err instanceof NotAvailableError ? err.message : err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    for (const name of names) {
      const result = results[name]!;
      if (result.runs.length === 0 && result.unavailable === undefined && result.error === undefined) {
        if (err instanceof NotAvailableError) result.unavailable = message;
        else result.error = `setup: ${message}`;
      }
    }
    log(`  ${group.name}: setup failed: ${message}`);
  } finally {
    if (group.teardown) {
      try {
        await group.teardown();
      } catch (err: unknown) {
        log(`  ${group.name}: teardown failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }
  return { name: group.name, systems: results, seconds: round((performance.now() - started) / 1000, 1) };
}

function formatValues(values: Record<string, number>): string {
  return Object.entries(values)
    .map(([k, v]) => `${k}=${formatNumber(v)}`)
    .join(' ');
}

export function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString('en-US');
  if (Math.abs(v) >= 10) return v.toFixed(1);
  if (Math.abs(v) >= 1) return v.toFixed(2);
  return v.toFixed(3);
}

/** Times `fn` and accounts the CPU each role's process used meanwhile. */
export async function measured<T>(roles: ProcessRoles, fn: () => Promise<T>): Promise<{ result: T; seconds: number; cpu: CpuAccount }> {
  const start: CpuSample = sampleCpu(roles);
  const result = await fn();
  const end = sampleCpu(roles);
  const cpu = cpuBetween(start, end);
  return { result, seconds: (end.at - start.at) / 1000, cpu };
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Nearest-rank percentile of an unsorted sample. */
export function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  const rank = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[rank]!;
}

/**
 * A latency loop's figures from every round trip it made, warm-up first: p50 and p99 of those
 * after the warm-up (the rows), and of the first `n` (a process just started: `cold_p50`,
 * `cold_p99` in the JSON).
 */
export function latencyFigures(all: readonly number[], warmup: number, n: number): { values: { p50: number; p99: number }; extra: Record<string, number> } {
  const warm = all.slice(warmup);
  const cold = all.slice(0, Math.min(n, warmup));
  return {
    values: { p50: percentile(warm, 50), p99: percentile(warm, 99) },
    extra: { jobs: n, warmup, mean: warm.reduce((a, b) => a + b, 0) / warm.length, max: Math.max(...warm), ...(cold.length === 0 ? {} : { cold_p50: percentile(cold, 50), cold_p99: percentile(cold, 99) }) },
  };
}

/** Runs `task(i)` for i in [0, n) with at most `window` in flight. */
export async function pool(n: number, window: number, task: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  async function lane(): Promise<void> {
    while (next < n) await task(next++);
  }
  await Promise.all(Array.from({ length: Math.min(window, n) }, lane));
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
