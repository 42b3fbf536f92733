/**
 * The benchmark's own servers and process accounting. Starts a redis-server on a free port in a
 * temp directory (never the machine's 6379), reads per-process CPU time and resident memory from
 * /proc, so every scenario can say which process was on the CPU.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) if (child.pid) try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ }
});

/** Remembers a child so an abrupt exit of the harness kills it by pid. */
export function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
}

/** A port nothing listens on now, from the ephemeral range (never 4222 or 6379). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface RedisServer {
  readonly port: number;
  readonly pid: number;
  readonly dir: string;
  readonly mode: 'aof' | 'memory';
  stop(options?: { keepDir?: boolean }): Promise<void>;
}

export function redisServerBinary(): string | null {
  if (process.env['REDIS_SERVER_BIN']) return process.env['REDIS_SERVER_BIN'];
  for (const candidate of ['/usr/bin/redis-server', '/usr/local/bin/redis-server', '/usr/sbin/redis-server']) {
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

export function redisVersion(): string {
  const bin = redisServerBinary();
  if (!bin) return 'not installed';
  try {
    return /v=([\d.]+)/.exec(execFileSync(bin, ['--version'], { encoding: 'utf8' }))?.[1] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * `aof`: appendonly everysec (BullMQ's durability parity with docket's acknowledged appends,
 * which survive a process crash but not a power cut); `memory`: no persistence at all.
 */
export async function startRedis(mode: 'aof' | 'memory', reuse?: { dir: string; port: number }): Promise<RedisServer & { startMs: number }> {
  const bin = redisServerBinary();
  if (!bin) throw new Error('redis-server is not installed (apt-get install -y redis-server)');
  const dir = reuse?.dir ?? mkdtempSync(join(tmpdir(), `docket-bench-redis-${mode}-`));
  const port = reuse?.port ?? (await freePort());
  const t0 = performance.now();
  const persistence = mode === 'aof'
    ? ['--appendonly', 'yes', '--appendfsync', 'everysec', '--save', '']
    : ['--appendonly', 'no', '--save', ''];
  const child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, ...persistence], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  track(child);
  await new Promise<void>((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error(`redis-server did not start:\n${buffer}`)), 10_000);
    child.once('error', (err) => { clearTimeout(timer); reject(err); });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`redis-server exited with ${code}:\n${buffer}`)); });
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      if (buffer.includes('Ready to accept connections')) return; // keep draining
      buffer += chunk;
      if (buffer.includes('Ready to accept connections')) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve();
      }
    });
    child.stderr!.resume();
  });
  const startMs = performance.now() - t0;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    port,
    pid: child.pid!,
    dir,
    mode,
    startMs,
    async stop(options: { keepDir?: boolean } = {}) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      if (!options.keepDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

const CLOCK_TICKS = 100; // USER_HZ on Linux

/** CPU seconds (user + system) a process has used so far; null when it is gone. */
export function cpuSecondsOf(pid: number): number | null {
  if (pid === process.pid) {
    const usage = process.cpuUsage();
    return (usage.user + usage.system) / 1e6;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return null;
  }
}

/** A thread's /proc schedstat: time on a core, time runnable but waiting for one, time slices. */
export interface Schedstat {
  readonly runNs: number;
  readonly waitNs: number;
  readonly slices: number;
}

/**
 * Each of a process's threads' schedstat, by thread id (/proc/<pid>/task/<tid>/schedstat); null
 * when the process is gone or the kernel keeps no schedstat. The waits are where a serial path's
 * tail goes on two cores shared by three or four busy processes: a process woken by a message
 * waits for a core before it runs (README "Performance"). By thread, so a thread that ends
 * between two samples drops out of both rather than taking its lifetime out of the difference.
 */
export function threadSchedstatsOf(pid: number): Map<string, Schedstat> | null {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return null;
  }
  const stats = new Map<string, Schedstat>();
  for (const tid of tids) {
    try {
      const [runNs, waitNs, slices] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').trim().split(' ').map(Number);
      if (Number.isFinite(runNs) && Number.isFinite(waitNs) && Number.isFinite(slices)) stats.set(tid, { runNs: runNs!, waitNs: waitNs!, slices: slices! });
    } catch {
      // The thread ended since the listing: it is in neither sample's difference.
    }
  }
  return stats.size === 0 ? null : stats;
}

/** A process's schedstat between two samples, summed over its threads: a thread new in `end` counts from 0. */
export function schedstatBetween(start: ReadonlyMap<string, Schedstat>, end: ReadonlyMap<string, Schedstat>): Schedstat {
  let runNs = 0;
  let waitNs = 0;
  let slices = 0;
  for (const [tid, after] of end) {
    const before = start.get(tid);
    runNs += after.runNs - (before?.runNs ?? 0);
    waitNs += after.waitNs - (before?.waitNs ?? 0);
    slices += after.slices - (before?.slices ?? 0);
  }
  return { runNs, waitNs, slices };
}

/** Resident set size in bytes; null when the process is gone. */
export function rssBytesOf(pid: number): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = /VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1];
    return kb === undefined ? null : Number(kb) * 1024;
  } catch {
    return null;
  }
}

/** The processes whose CPU a scenario accounts for, by role. */
export type ProcessRoles = Record<string, number>;

export interface CpuSample {
  readonly at: number;
  readonly cpu: Record<string, number | null>;
  readonly wait: Record<string, Map<string, Schedstat> | null>;
}

export function sampleCpu(roles: ProcessRoles): CpuSample {
  const cpu: Record<string, number | null> = {};
  const wait: Record<string, Map<string, Schedstat> | null> = {};
  for (const [role, pid] of Object.entries(roles)) {
    cpu[role] = cpuSecondsOf(pid);
    wait[role] = threadSchedstatsOf(pid);
  }
  return { at: performance.now(), cpu, wait };
}

/** CPU seconds and seconds waiting for a core per role between two samples, and the wall seconds between them. */
export function cpuBetween(start: CpuSample, end: CpuSample): { wall_s: number; cpu_s: Record<string, number>; wait_s: Record<string, number> } {
  const cpu_s: Record<string, number> = {};
  for (const [role, before] of Object.entries(start.cpu)) {
    const after = end.cpu[role];
    if (before !== null && after !== null && after !== undefined) cpu_s[role] = round(after - before, 2);
  }
  const wait_s: Record<string, number> = {};
  for (const [role, before] of Object.entries(start.wait)) {
    const after = end.wait[role];
    if (before && after) wait_s[role] = round(schedstatBetween(before, after).waitNs / 1e9, 2);
  }
  return { wall_s: round((end.at - start.at) / 1000, 3), cpu_s, wait_s };
}

export function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
