/** What every workload group shares: the peer Redis servers and how docket's node is run. */
import { startNatsServer, type TestNatsServer } from '../../test/support/nats-server.js';
import { NotAvailableError } from './harness.js';
import type { RedisServer } from './procs.js';
import { startDocketNode, tempDir, type DocketNodeHandle, type NodeMode } from './docket.js';
import type { BenchConfig } from './config.js';

export interface BenchEnv {
  readonly config: BenchConfig;
  readonly nodeMode: NodeMode;
  readonly redis: { readonly aof: RedisServer | null; readonly memory: RedisServer | null; readonly reason: string | null };
}

export function redisOf(env: BenchEnv, mode: 'aof' | 'memory'): RedisServer {
  const redis = env.redis[mode];
  if (!redis) throw new NotAvailableError(`redis-server not running: ${env.redis.reason ?? 'unknown'}`);
  return redis;
}

export interface DocketRun {
  readonly url: string;
  readonly nats: TestNatsServer;
  readonly node: DocketNodeHandle;
  readonly dataDir: string;
  /** Processes to account CPU for. */
  roles(): Record<string, number>;
  /** Something to finish while the run is torn down (a worker's close waiting on its long poll). */
  defer(closing: Promise<unknown>): void;
}

const debug = process.env['BENCH_DEBUG'] ? (line: string) => void process.stderr.write(`    [docket run] ${line}\n`) : () => undefined;

/** A fresh nats-server and docket node for one run, stopped (and their files removed) after. */
export async function withDocket<T>(env: BenchEnv, fn: (run: DocketRun) => Promise<T>, nodeMode: NodeMode = env.nodeMode): Promise<T> {
  const t0 = performance.now();
  const since = (): string => `${Math.round(performance.now() - t0)} ms`;
  const nats = await startNatsServer();
  const data = tempDir('docket-bench-node-');
  const deferred: Promise<unknown>[] = [];
  let node: DocketNodeHandle | undefined;
  try {
    debug(`nats-server up ${since()}`);
    node = await startDocketNode(nats.url, data.path, nodeMode);
    debug(`node serving ${since()}`);
    const handle = node;
    return await fn({
      url: nats.url,
      nats,
      node,
      dataDir: data.path,
      roles: () => (handle.pid === process.pid ? { bench: process.pid, nats: nats.process.pid! } : { bench: process.pid, node: handle.pid, nats: nats.process.pid! }),
      defer: (closing) => void deferred.push(closing.catch(() => undefined)),
    });
  } finally {
    debug(`measured ${since()}`);
    await node?.close().catch(() => undefined);
    debug(`node closed ${since()}`);
    await Promise.all(deferred);
    debug(`deferred done ${since()}`);
    await nats.stop();
    data.remove();
    debug(`nats stopped ${since()}`);
  }
}
