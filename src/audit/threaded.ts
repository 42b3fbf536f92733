/**
 * The audit beside the reader: a reader hands packed batches (./packed.ts) to `write`, and the
 * audit folds them on a worker thread while the reader's thread keeps reading, so the two costs
 * overlap instead of adding up. With log v2's commits reading costs ~0.4-1.2 µs of CPU per event
 * against ~4.4 µs of audit, so the overlap saves little per event, and the worker starts cold:
 * `docket audit` takes the thread only for a large read (`autoThread`) unless told `--thread
 * on|off`. When no thread can be started it audits inline, with the same results.
 *
 * Flow control: `backlog` counts batches written and not yet folded; a reader waits with
 * `whenBelow(n)` before asking the stream for more, so memory stays bounded when the audit is
 * the slower side.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Auditor } from './audit.js';
import type { FromAuditWorker, ToAuditWorker } from './audit-worker.js';
import { unpack } from './packed.js';
import type { AuditOptions, AuditReport } from './types.js';

/**
 * `docket audit --thread auto`: a log this large (bytes read) is audited on a worker thread, a
 * smaller one inline. The worker starts cold (its own isolate compiles the audit again), a fixed
 * cost that only a long read pays back. Measured on a 2-core AMD EPYC
 * (`GOMAXPROCS=1 npx tsx bench/audit-bench.ts N`: `auditLog` with `thread` true and false, ~300
 * stored bytes an event; events/s on the thread against inline, two passes each): 100,000 events
 * 150-175k against 260-294k; 300,000 227-258k against 289-290k; 600,000 278k against 247-254k;
 * 1,000,000 266-275k against 234-268k.
 */
export const AUTO_THREAD_MIN_BYTES = 160 * 2 ** 20;

/** Whether `--thread auto` audits on a worker thread: a large read, and a second core for it. */
export function autoThread(readBytes: number, cores: number): boolean {
  return cores >= 2 && readBytes >= AUTO_THREAD_MIN_BYTES;
}

export interface PackedAudit {
  /** Takes ownership of `buffer` (it is transferred to the worker). */
  write(buffer: ArrayBuffer, count: number, lastSeq: number): void;
  /** Batches written and not yet folded. */
  readonly backlog: number;
  /** Resolves once the backlog is below `n` batches. */
  whenBelow(n: number): Promise<void>;
  /** Folds what is left and returns the report; the audit is closed after. */
  finish(): Promise<AuditReport>;
  /** Where the audit runs. */
  readonly mode: 'thread' | 'inline';
  /** Why it runs inline although a thread was asked for (null otherwise). */
  readonly noThreadReason?: string | null;
}

class InlineAudit implements PackedAudit {
  readonly mode = 'inline';
  readonly backlog = 0;
  private readonly auditor: Auditor;
  constructor(
    options: AuditOptions,
    /** Why no thread was used, when one was asked for. */
    readonly noThreadReason: string | null = null,
  ) {
    this.auditor = new Auditor(options);
  }
  write(buffer: ArrayBuffer): void {
    unpack(buffer, (m) => this.auditor.push(m));
  }
  whenBelow(): Promise<void> {
    return Promise.resolve();
  }
  async finish(): Promise<AuditReport> {
    return this.auditor.report();
  }
}

class ThreadAudit implements PackedAudit {
  readonly mode = 'thread';
  backlog = 0;
  private waiters: { n: number; resolve: () => void }[] = [];
  private failure: Error | null = null;
  private reportWaiter: { resolve: (r: AuditReport) => void; reject: (e: Error) => void } | null = null;

  constructor(private readonly worker: Worker) {
    worker.on('message', (msg: FromAuditWorker) => {
      if (msg.type === 'ack') {
        this.backlog -= 1;
        this.release();
      } else if (msg.type === 'report') {
        this.reportWaiter?.resolve(msg.report);
      } else if (msg.type === 'error') {
        this.fail(new Error(`audit worker: ${msg.message}`));
      }
    });
    worker.on('error', (err) => this.fail(err));
    worker.on('exit', (code) => {
      if (this.reportWaiter !== null || code !== 0) this.fail(new Error(`audit worker exited with ${code}`));
    });
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const w of this.waiters) w.resolve();
    this.waiters = [];
    this.reportWaiter?.reject(this.failure);
    this.reportWaiter = null;
  }

  private release(): void {
    const still: { n: number; resolve: () => void }[] = [];
    for (const w of this.waiters) (this.backlog < w.n ? w.resolve() : still.push(w));
    this.waiters = still;
  }

  write(buffer: ArrayBuffer, _count: number, lastSeq: number): void {
    if (this.failure) throw this.failure;
    this.backlog += 1;
    this.worker.postMessage({ type: 'batch', buffer, lastSeq } satisfies ToAuditWorker, [buffer]);
  }

  whenBelow(n: number): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.backlog < n) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ n, resolve }));
  }

  async finish(): Promise<AuditReport> {
    if (this.failure) throw this.failure;
    try {
      return await new Promise<AuditReport>((resolve, reject) => {
        this.reportWaiter = { resolve, reject };
        this.worker.postMessage({ type: 'end' } satisfies ToAuditWorker);
      });
    } finally {
      this.reportWaiter = null;
      await this.worker.terminate();
    }
  }
}

/**
 * Starts the worker. The sources run as TypeScript through tsx, which bin/docket.js registers on
 * the main thread only (a worker's `--import` in execArgv is not honoured on Node 20), so a
 * worker for a .ts module is a small script that registers tsx first, then imports the module.
 */
function createWorker(workerData: unknown): Worker {
  const here = import.meta.url;
  // A larger young generation: the fold allocates per event, and fewer scavenges promote less.
  const resourceLimits = { maxYoungGenerationSizeMb: 64 };
  if (!here.endsWith('.ts')) return new Worker(new URL('./audit-worker.js', here), { workerData, resourceLimits });
  const target = new URL('./audit-worker.ts', here).href;
  // tsx's ESM API, by path: its package exports give CommonJS to require.resolve.
  const api = new URL('dist/esm/api/index.mjs', pathToFileURL(createRequire(here).resolve('tsx/package.json'))).href;
  const boot =
    `import(${JSON.stringify(api)}).then((m) => { m.register(); return import(${JSON.stringify(target)}); })` +
    `.catch((err) => { require('node:worker_threads').parentPort.postMessage({ type: 'error', message: String((err && err.stack) || err) }); });`;
  return new Worker(boot, { eval: true, workerData, resourceLimits });
}

export interface StartAuditOptions extends AuditOptions {
  /** Run on a worker thread. @defaultValue true */
  readonly thread?: boolean;
}

/** Starts an audit fed with packed batches: on a worker thread when it starts, else inline. */
export async function startPackedAudit(options: StartAuditOptions = {}): Promise<PackedAudit> {
  const { thread = true, ...auditOptions } = options;
  if (!thread) return new InlineAudit(auditOptions);
  try {
    const worker = createWorker({ options: auditOptions });
    await new Promise<void>((resolve, reject) => {
      const onMessage = (msg: FromAuditWorker) => {
        if (msg.type === 'error') {
          void worker.terminate();
          reject(new Error(msg.message));
          return;
        }
        if (msg.type !== 'ready') return;
        worker.off('message', onMessage);
        worker.off('error', reject);
        resolve();
      };
      worker.on('message', onMessage);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`audit worker exited with ${code} before it was ready`)));
    });
    worker.removeAllListeners('exit');
    return new ThreadAudit(worker);
  } catch (err) {
    // No thread (the worker's module cannot load here): the same audit, inline, and said why.
    return new InlineAudit(auditOptions, err instanceof Error ? err.message.split('\n')[0] : String(err));
  }
}
