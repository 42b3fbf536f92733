/**
 * docket under test: its node (a process of its own by default, like Redis for BullMQ), its
 * client and its worker, loaded by dynamic import so a missing or broken module makes the row
 * "not available" instead of stopping the harness. The APIs are typed here as the bench uses them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NotAvailableError } from './harness.js';
import { track } from './procs.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

export interface SubmitSpec {
  readonly queue: string;
  readonly params?: Record<string, unknown>;
  readonly priority?: number;
  /** Flow control: the queue's key_concurrency and key_rate hold per key. */
  readonly concurrency_key?: string;
  /** Dependencies (issue 15): the job waits until these jobs succeeded. */
  readonly depends_on?: readonly string[];
  /** A keyed job (issue 14): one live job per (queue, key). */
  readonly key?: Record<string, string | number | null>;
}

export interface ClientApi {
  submit(job: SubmitSpec): Promise<{ job_id: string; status: string; created: boolean }>;
  submitBatch(jobs: readonly SubmitSpec[]): Promise<{ jobs: ({ ok: boolean; job_id?: string; error?: { code: string; message: string } })[] }>;
  events(options: { queue?: string; types?: readonly string[]; signal?: AbortSignal }): AsyncIterable<unknown>;
  /** Live events (core NATS), subscribed once `ready` resolves. */
  live(options: { queue?: string; types?: readonly string[]; signal?: AbortSignal }): AsyncIterable<{ aggregate: { id: string } }> & { ready: Promise<void> };
  /** Flow control (a field left out keeps its value; null clears it); absent before flow control existed. */
  setQueue?(queue: string, settings: { concurrency?: number | null; key_concurrency?: number | null; create?: boolean }): Promise<unknown>;
  /** Job sets (issue 14); absent before job sets existed. */
  putJobSet?(command: { queue: string; key_source: { url: string; sql: string } }): Promise<unknown>;
  refresh?(command: { queue: string }): Promise<{ added: number; removed: number; orphaned: number; re_pended: number }>;
  close(): Promise<void>;
}

export interface WorkerApi {
  start(): Promise<void>;
  close(): Promise<void>;
  /** Runs finished, counted once the node acknowledged the completion. */
  readonly counts?: { readonly succeeded: number; readonly failed: number; readonly lost: number };
}

/** Resolves when the worker's acknowledged completions reach `n` (polled every millisecond). */
export function acknowledged(worker: WorkerApi, n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setInterval(() => {
      const c = worker.counts!;
      if (c.failed + c.lost > 0) {
        clearInterval(timer);
        reject(new Error(`worker counts ${JSON.stringify(c)}: a no-op job did not succeed`));
      } else if (c.succeeded >= n) {
        clearInterval(timer);
        resolve();
      }
    }, 1);
  });
}

export interface WorkerOptions {
  readonly servers?: string;
  /** An in-process node (`DocketNodeHandle.local`): the worker is embedded in it. */
  readonly local?: unknown;
  readonly queue: string;
  readonly concurrency: number;
  /** The claim long poll; the worker's default (2 s) unless given. */
  readonly claimWaitMs?: number;
  readonly handler: (job: unknown, ctx: unknown) => Promise<unknown>;
}

/**
 * Whether docket runs from its build (`dist/`): what a user runs from the package, in plain Node.
 * `npm run bench` builds first and sets BENCH_FROM_BUILD (`BENCH_FROM_SRC=1` runs the TypeScript
 * through tsx instead, whose transform adds a call per named closure: about 5% of the embedded
 * job path's CPU); the diagnostic scripts take BENCH_NODE_DIST=1 after an `npm run build`.
 */
export function fromBuild(): boolean {
  return process.env['BENCH_FROM_BUILD'] === '1' || process.env['BENCH_NODE_DIST'] === '1';
}

/** The URL of one of docket's modules (`src/...js` or `machines/...js`): the build's, or the source's. */
export function docketModuleUrl(relative: string): string {
  return new URL(`../../${fromBuild() ? `dist/${relative}` : relative}`, import.meta.url).href;
}

export async function load<T>(relative: string): Promise<T> {
  const file = join(REPO, relative.replace(/\.js$/, '.ts'));
  if (!existsSync(file)) throw new NotAvailableError(`${relative.replace(/\.js$/, '.ts')} does not exist yet`);
  try {
    return (await import(docketModuleUrl(relative))) as T;
  } catch (err: unknown) {
    throw new NotAvailableError(`${relative.replace(/\.js$/, '.ts')} failed to load: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
  }
}

export async function connectClient(url: string, options: { requestTimeoutMs?: number } = {}): Promise<ClientApi> {
  const { Client } = await load<{ Client: { connect(o: { servers: string; requestTimeoutMs?: number }): Promise<ClientApi> } }>('src/client/client.js');
  return Client.connect({ servers: url, ...options });
}

/** A client of an in-process node (`DocketNodeHandle.local`): its commands are answered in process (README "Embedded workers"). */
export async function connectLocalClient(local: unknown): Promise<ClientApi> {
  const { Client } = await load<{ Client: { connect(o: { local: unknown }): Promise<ClientApi> } }>('src/client/client.js');
  return Client.connect({ local });
}

export async function workerClass(): Promise<new (options: WorkerOptions) => WorkerApi> {
  const { Worker } = await load<{ Worker: new (options: WorkerOptions) => WorkerApi }>('src/client/worker.js');
  return Worker;
}

export type NodeMode = 'cli' | 'child' | 'inproc';

/** `cli` when `docket up` exists, else `child` (bench/node-child.ts around startNode). */
export function defaultNodeMode(): NodeMode {
  return existsSync(join(REPO, 'src/cli/main.ts')) ? 'cli' : 'child';
}

export interface DocketNodeHandle {
  readonly mode: NodeMode;
  /** The node's process (this process for `inproc`). */
  readonly pid: number;
  /** Milliseconds from spawn to its `serving` line (to startNode resolving, in process). */
  readonly startMs: number;
  /** What the node logged while starting (`log folded` carries events and ms). */
  readonly startLog: readonly string[];
  /** `inproc` only: the node itself, for a worker embedded in it (`local`, README "Embedded workers"). */
  readonly local?: unknown;
  close(): Promise<void>;
}

/** Starts a docket node on `url` with checkpoints in `dataDir`, and waits until it serves. */
export async function startDocketNode(url: string, dataDir: string, mode: NodeMode, timeoutMs = 300_000): Promise<DocketNodeHandle> {
  if (mode === 'inproc') {
    const { startNode } = await load<{ startNode(o: { servers: string; dataDir: string }): Promise<{ close(): Promise<void> }> }>('src/node.js');
    const t0 = performance.now();
    const node = await startNode({ servers: url, dataDir });
    return { mode, pid: process.pid, startMs: performance.now() - t0, startLog: [], local: node, close: () => node.close() };
  }
  const entry = mode === 'cli' ? ['src/cli/main.ts', 'up', '--server', url, '--data-dir', dataDir] : ['bench/node-child.ts', url, dataDir];
  const needed = mode === 'child' ? 'src/node.ts' : entry[0]!;
  if (!existsSync(join(REPO, needed))) throw new NotAvailableError(`${needed} does not exist yet`);
  const t0 = performance.now();
  // `node --import tsx` rather than `npx tsx`: one process, so its pid is the node's (CPU, RSS).
  const profileDir = process.env['BENCH_CPU_PROF_DIR'];
  const profiling = [...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []), ...(process.env['BENCH_NODE_FLAGS']?.split(' ').filter(Boolean) ?? [])];
  const fromDist = mode === 'cli' && fromBuild();
  const args = fromDist ? ['dist/src/cli/main.js', ...entry.slice(1)] : ['--import', 'tsx', ...entry];
  const child = spawn(process.execPath, [...profiling, ...args], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  const lines: string[] = [];
  const startMs = await new Promise<number>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => finish(new Error(`docket node not serving after ${timeoutMs / 1000} s:\n${lines.slice(-20).join('\n')}`)), timeoutMs);
    function finish(err: Error | null, ms = 0): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        child.kill('SIGKILL');
        reject(err);
      } else resolve(ms);
    }
    const onLine = (line: string): void => {
      if (lines.length < 200) lines.push(line);
      if (/"msg":"serving"|\bserving\b/.test(line)) finish(null, performance.now() - t0);
    };
    for (const stream of [child.stdout!, child.stderr!]) {
      let buffer = '';
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        if (settled) return; // keep draining after start so the pipe never blocks the node
        buffer += chunk;
        let nl: number;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          onLine(buffer.slice(0, nl));
          buffer = buffer.slice(nl + 1);
        }
      });
    }
    child.once('error', (err) => finish(err));
    child.once('exit', (code, signal) => {
      const tail = lines.slice(-15).join('\n');
      if (mode === 'cli' && /unknown command|Cannot find module|ERR_MODULE_NOT_FOUND/i.test(tail)) {
        finish(new NotAvailableError(`docket up exited (${code ?? signal}): ${tail.split('\n').find((l) => /unknown|Cannot find|ERR_MODULE/i.test(l)) ?? ''}`));
      } else finish(new Error(`docket node exited with ${code ?? signal} before serving:\n${tail}`));
    });
  });
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  return {
    mode,
    pid: child.pid!,
    startMs,
    startLog: lines,
    async close() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}

export function tempDir(prefix: string): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}


export type { ChildProcess };
