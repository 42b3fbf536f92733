/**
 * CPU per job of each process (the docket node, nats-server, this process's client and Worker)
 * in an end-to-end run of no-op jobs, with the node's socket writes and bytes per job from
 * /proc/<pid>/io: where the time goes when a speed target is missed (README "Performance").
 * Docket only, one run; alternate two checkouts to compare them.
 *
 *   npx tsx bench/cpu-per-job.ts [jobs=20000] [concurrency=100]
 */
import { readFileSync } from 'node:fs';
import { startNatsServer } from '../test/support/nats-server.js';
import { acknowledged, connectClient, startDocketNode, tempDir, workerClass } from './lib/docket.js';
import { cpuSecondsOf } from './lib/procs.js';
import { submitInChunks } from './lib/workload.js';

const n = Number(process.argv[2] ?? 20_000);
const concurrency = Number(process.argv[3] ?? 100);

/** The counters of /proc/<pid>/io (wchar, syscw, rchar, syscr, ...). */
function ioOf(pid: number): Record<string, number> {
  return Object.fromEntries(
    readFileSync(`/proc/${pid}/io`, 'utf8')
      .trim()
      .split('\n')
      .map((line) => {
        const [key, value] = line.split(': ');
        return [key!, Number(value)];
      }),
  );
}

/** A process's kernel CPU seconds (stime, field 15 of /proc/<pid>/stat). */
function systemSecondsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[12]) / 100;
}

const server = await startNatsServer();
const dir = tempDir('cpu-per-job');
const node = await startDocketNode(server.url, dir.path, 'cli');
const client = await connectClient(server.url);
const Worker = await workerClass();
let handled = 0;
let done!: () => void;
const allHandled = new Promise<void>((resolve) => (done = resolve));
const worker = new Worker({
  servers: server.url,
  queue: 'e2e',
  concurrency,
  handler: async () => {
    if (++handled === n) done();
    return null;
  },
});
await worker.start();
const natsPid = server.process.pid!;
const io0 = ioOf(node.pid);
const nodeSys0 = systemSecondsOf(node.pid);
const natsSys0 = systemSecondsOf(natsPid);
const node0 = cpuSecondsOf(node.pid)!;
const nats0 = cpuSecondsOf(natsPid)!;
const bench0 = process.cpuUsage();
const t0 = performance.now();
await submitInChunks(client, 'e2e', n, 1_000);
await allHandled;
if (worker.counts) await acknowledged(worker, n);
const wallS = (performance.now() - t0) / 1000;
const io1 = ioOf(node.pid);
const perJob = (seconds: number) => Math.round((seconds * 1e6) / n);
const bench = process.cpuUsage(bench0);
console.log(
  JSON.stringify({
    jobs: n,
    concurrency,
    rate: Math.round(n / wallS),
    node_us_per_job: perJob(cpuSecondsOf(node.pid)! - node0),
    nats_us_per_job: perJob(cpuSecondsOf(natsPid)! - nats0),
    bench_us_per_job: perJob((bench.user + bench.system) / 1e6),
    // Kernel time (syscalls, wakeups): on a VM where a syscall is dear, the share that fewer messages would save.
    node_sys_us_per_job: perJob(systemSecondsOf(node.pid) - nodeSys0),
    nats_sys_us_per_job: perJob(systemSecondsOf(natsPid) - natsSys0),
    bench_sys_us_per_job: perJob(bench.system / 1e6),
    node_write_bytes_per_job: Math.round((io1['wchar']! - io0['wchar']!) / n),
    node_writes_per_job: +((io1['syscw']! - io0['syscw']!) / n).toFixed(2),
    node_reads_per_job: +((io1['syscr']! - io0['syscr']!) / n).toFixed(2),
  }),
);
await worker.close();
await client.close();
await node.close();
await server.stop();
dir.remove();
process.exit(0);
