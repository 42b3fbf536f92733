/**
 * `npm run bench [-- --quick] [-- --only <group|scenario prefix>,...] [-- --node cli|child|inproc]`
 *
 * docket beside BullMQ and raw JetStream on the same machine in one run (issue 5). Starts its own
 * nats-server per scenario (ephemeral port, temp dir) and its own redis-servers (AOF everysec and
 * in memory, free ports, temp dirs); never touches 4222 or 6379. Each figure is the median of 3
 * runs with min-max; the table goes to stdout and to bench/results/latest.{json,md}. Progress
 * goes to stderr.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, freemem, loadavg, totalmem, release } from 'node:os';
import { join } from 'node:path';
import { serverThreads } from '../src/cli/local-nats.js';
import { natsServerBinary } from '../test/support/nats-server.js';
import { benchConfig } from './lib/config.js';
import { defaultNodeMode, fromBuild, REPO, type NodeMode } from './lib/docket.js';
import type { BenchEnv } from './lib/env.js';
import { runGroup, type Group, type GroupResult } from './lib/harness.js';
import { profileMarkdown, summariseProfiles, type ProfileSummary } from './lib/profile.js';
import { redisServerBinary, redisVersion, startRedis, type RedisServer } from './lib/procs.js';
import { buildScenario, cpuTable, markdownTable, type ScenarioResult } from './lib/report.js';
import { auditGroup } from './scenarios/audit.js';
import { flowControlGroup } from './scenarios/flow.js';
import { fanInGroup } from './scenarios/fan-in.js';
import { foldGroup } from './scenarios/fold.js';
import { jobsetRefreshGroup } from './scenarios/jobset-refresh.js';
import { largeGroup } from './scenarios/large.js';
import { schedulesGroup } from './scenarios/schedules.js';
import { substrateGroup } from './scenarios/substrate.js';
import { bulkSubmitGroup, endToEndGroup, latencyGroup } from './scenarios/workloads.js';

const log = (line: string): void => void process.stderr.write(`${line}\n`);

interface Args {
  quick: boolean;
  only: string[] | null;
  node: NodeMode | null;
  out: string;
  profile: boolean;
  /** Keep the other groups' rows of the previous latest.json (re-running one group). */
  merge: boolean;
  /** Only re-render latest.md from latest.json. */
  render: boolean;
}

function parseArgs(argv: string[]): Args {
  let quick = false;
  let merge = false;
  let render = false;
  let profile = false;
  let only: string[] | null = null;
  let node: NodeMode | null = null;
  let out = join(REPO, 'bench/results');
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--quick') quick = true;
    else if (arg === '--profile') profile = true;
    else if (arg === '--merge') merge = true;
    else if (arg === '--render') render = true;
    else if (arg === '--only') only = (argv[++i] ?? '').split(',').filter(Boolean);
    else if (arg.startsWith('--only=')) only = arg.slice(7).split(',').filter(Boolean);
    else if (arg === '--node') node = argv[++i] as NodeMode;
    else if (arg === '--out') out = argv[++i]!;
    else if (arg === '--help' || arg === '-h') {
      log('usage: npm run bench -- [--quick] [--only <group prefix>,...] (groups: append, fold, bulk_submit, end_to_end_c100|c10|c1, latency, flow_control, fan_in, large_queue, schedules, jobset_refresh, audit) [--node cli|child|inproc] [--profile] [--merge] [--render] [--out dir]\n  --render re-renders latest.md from latest.json without running anything\n  --merge keeps the rows of groups not run now from the previous latest.json (same --quick only)');
      process.exit(0);
    } else {
      log(`unknown argument ${arg}`);
      process.exit(2);
    }
  }
  if (node !== null && !['cli', 'child', 'inproc'].includes(node)) {
    log(`--node must be cli, child or inproc`);
    process.exit(2);
  }
  return { quick, only, node, out, profile, merge, render };
}

function version(cmd: string, args: string[], pattern: RegExp): string {
  try {
    return pattern.exec(execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }))?.[1] ?? 'unknown';
  } catch {
    return 'not found';
  }
}

function packageVersion(name: string): string {
  try {
    return (JSON.parse(readFileSync(join(REPO, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

function machineInfo(nodeMode: NodeMode, quick: boolean, args: { profile: boolean }): Record<string, unknown> {
  const cpu = cpus();
  let commit = 'unknown';
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO, encoding: 'utf8' }).trim();
  } catch {
    /* not a checkout */
  }
  return {
    date: new Date().toISOString(),
    cpu_model: cpu[0]?.model ?? 'unknown',
    cores: cpu.length,
    load_average_start: loadavg().map((x) => Math.round(x * 100) / 100),
    memory_gib: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    free_memory_gib_start: Math.round((freemem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    node: process.version,
    nats_server: version(natsServerBinary(), ['--version'], /v?(\d+\.\d+\.\d+)/),
    nats_server_gomaxprocs: process.env['GOMAXPROCS'] || 'default',
    redis_server: redisVersion(),
    bullmq: packageVersion('bullmq'),
    ioredis: packageVersion('ioredis'),
    nats_js: packageVersion('@nats-io/jetstream'),
    xstate: packageVersion('xstate'),
    docket_commit: commit,
    docket_node: nodeMode,
    docket_from: fromBuild() ? 'dist' : 'src (tsx)',
    quick,
    profile: args.profile,
  };
}

/** redis-server where it is missing: installed with apt-get when this runs as root. */
function ensureRedisBinary(): string | null {
  if (redisServerBinary()) return null;
  if (process.getuid?.() === 0) {
    log('redis-server missing: apt-get install -y redis-server');
    const r = spawnSync('apt-get', ['install', '-y', 'redis-server'], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (r.status === 0 && redisServerBinary()) return null;
  }
  return 'redis-server is not installed (apt-get install -y redis-server)';
}

function readPrevious(file: string, quick: boolean): BenchJson | null {
  try {
    const previous = JSON.parse(readFileSync(file, 'utf8')) as BenchJson;
    if (Boolean(previous.machine['quick']) !== quick) {
      log(`--merge: ${file} is from a ${previous.machine['quick'] ? '--quick' : 'full'} run; not merging`);
      return null;
    }
    return previous;
  } catch {
    log(`--merge: no readable ${file}; not merging`);
    return null;
  }
}

function selected(group: Group, only: string[] | null): boolean {
  if (!only) return true;
  return only.some((token) => group.name.startsWith(token));
}

interface GroupRun {
  readonly date: string;
  readonly load_average_start: number[];
  readonly load_average_end: number[];
  readonly docket_commit: string;
}

interface BenchJson {
  readonly machine: Record<string, unknown>;
  readonly config: unknown;
  readonly scenarios: Record<string, ScenarioResult>;
  /** When each group's rows were measured (a --merge keeps older groups). */
  readonly group_runs?: Record<string, GroupRun>;
  readonly profiles?: Record<string, ProfileSummary>;
  readonly groups: Record<string, { seconds: number; systems: GroupResult['systems'] }>;
}

function renderMarkdown(json: BenchJson): string {
  const { machine, scenarios } = json;
  const groups: GroupResult[] = Object.entries(json.groups).map(([name, g]) => ({ name, seconds: g.seconds, systems: g.systems }));
  const notes = Object.entries(scenarios)
    .filter(([, s]) => s.note)
    .map(([name, s]) => `- \`${name}\`: ${s.note}`);
  const loads = (xs: number[] | undefined): string => (xs ?? []).join(' ');
  // Groups measured in other runs (--merge), by run.
  const byRun = new Map<string, { run: GroupRun; groups: string[] }>();
  for (const [group, run] of Object.entries(json.group_runs ?? {})) {
    if (run.date === machine['date']) continue;
    const entry = byRun.get(run.date) ?? { run, groups: [] };
    entry.groups.push(group);
    byRun.set(run.date, entry);
  }
  const provenance = [...byRun.values()].map(
    ({ run, groups: names }) => `Rows of ${names.join(', ')} come from the run of ${run.date} (docket ${run.docket_commit}, load ${loads(run.load_average_start)} → ${loads(run.load_average_end)}).`,
  );
  const profiles = json.profiles ?? {};
  return [
    `# docket bench${machine['quick'] ? ' (--quick: 10x fewer jobs)' : ''}`,
    '',
    `${String(machine['date'])} · ${String(machine['cores'])} × ${String(machine['cpu_model'])} · load ${loads(machine['load_average_start'] as number[])} → ${loads(machine['load_average_end'] as number[])} · ${String(machine['memory_gib'])} GiB · Node ${String(machine['node'])} · nats-server ${String(machine['nats_server'])}${machine['nats_server_gomaxprocs'] === undefined ? '' : ` (GOMAXPROCS ${String(machine['nats_server_gomaxprocs'])})`} · redis-server ${String(machine['redis_server'])} · BullMQ ${String(machine['bullmq'])} · docket ${String(machine['docket_commit'])} (node: ${String(machine['docket_node'])}, from ${String(machine['docket_from'] ?? 'src (tsx)')}) · ${String(machine['seconds'])} s`,
    '',
    'Each figure: median of 3 runs (min–max). Ratio = docket ÷ peer (for ms and bytes, lower is better).',
    ...(provenance.length ? ['', ...provenance, "Each row's docket and peer figures were measured in the same run."] : []),
    '',
    markdownTable(scenarios),
    '',
    '## Where the CPU went (median run, % of one core; 2 cores = 200%; after the dot, the time its threads waited for a core, summed, as % of the wall time)',
    '',
    cpuTable(groups),
    '',
    ...(notes.length ? ['## Notes', '', ...notes, ''] : []),
    ...(Object.keys(profiles).length
      ? [
          '## Profiles (--profile: docket nodes ran with --cpu-prof, so the figures above carry its overhead)',
          '',
          ...Object.entries(profiles).map(([group, summary]) => profileMarkdown(group, summary)),
        ]
      : []),
  ].join('\n');
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.render) {
    const json = JSON.parse(readFileSync(join(args.out, 'latest.json'), 'utf8')) as BenchJson;
    const md = renderMarkdown(json);
    writeFileSync(join(args.out, 'latest.md'), md);
    process.stdout.write(`${md}\n`);
    return;
  }
  const config = benchConfig(args.quick);
  if (process.env['BENCH_FROM_SRC'] !== '1') {
    // docket runs from its build, as from the package (bench/lib/docket.ts fromBuild): build it
    // now, so the run never measures a stale dist/.
    log('building docket (npm run build; BENCH_FROM_SRC=1 runs the sources through tsx instead)');
    execFileSync('npm', ['run', 'build'], { cwd: REPO, stdio: ['ignore', 'ignore', 'inherit'] });
    process.env['BENCH_FROM_BUILD'] = '1';
  }
  // Every nats-server the bench starts inherits this: the one `docket up` starts gets the same
  // (src/cli/local-nats.ts serverThreads, one Go thread on two cores or fewer; a GOMAXPROCS you
  // set is kept), so the bench measures docket as a user of `docket up` runs it.
  const threads = serverThreads(availableParallelism(), process.env);
  if (threads !== undefined) process.env['GOMAXPROCS'] = threads;
  const nodeMode = args.node ?? defaultNodeMode();
  const machine = machineInfo(nodeMode, args.quick, args);
  log(`docket bench${args.quick ? ' --quick' : ''}: ${machine['cores']} × ${machine['cpu_model']}, load ${(machine['load_average_start'] as number[]).join(' ')}, node ${process.version}, nats-server ${machine['nats_server']} (GOMAXPROCS ${String(machine['nats_server_gomaxprocs'])}), redis ${machine['redis_server']}, docket node: ${nodeMode}`);

  const started = performance.now();
  let aof: RedisServer | null = null;
  let memory: RedisServer | null = null;
  let redisReason = ensureRedisBinary();
  const stopAll = async (): Promise<void> => {
    await aof?.stop().catch(() => undefined);
    await memory?.stop().catch(() => undefined);
    aof = memory = null;
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => void stopAll().finally(() => process.exit(130)));
  }

  const env: BenchEnv = {
    config,
    nodeMode,
    get redis() {
      return { aof, memory, reason: redisReason };
    },
  };
  const allGroups: Group[] = [
    substrateGroup(config),
    foldGroup(config),
    bulkSubmitGroup(env),
    endToEndGroup(env, 100),
    endToEndGroup(env, 10),
    endToEndGroup(env, 1),
    latencyGroup(env),
    flowControlGroup(env),
    fanInGroup(env),
    largeGroup(env),
    schedulesGroup(env),
    jobsetRefreshGroup(env),
    auditGroup(config.foldJobs * 8, config.quick ? 2 : 3),
  ];
  const groups = allGroups.filter((g) => selected(g, args.only));
  if (groups.length === 0) {
    log(`--only ${args.only?.join(',')} selects nothing`);
    process.exit(2);
  }

  const needsRedis = groups.some((g) => Object.keys(g.systems).some((s) => s.startsWith('bullmq_')));
  if (needsRedis && redisReason === null) {
    try {
      [aof, memory] = await Promise.all([startRedis('aof'), startRedis('memory')]);
    } catch (err: unknown) {
      redisReason = err instanceof Error ? err.message : String(err);
      log(`redis: ${redisReason}`);
    }
  }

  const results: GroupResult[] = [];
  const profiles: Record<string, ProfileSummary> = {};
  const profileRoot = join(args.out, 'profiles');
  try {
    for (const group of groups) {
      log(`${group.name} …`);
      if (args.profile) {
        const dir = join(profileRoot, group.name);
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true });
        process.env['BENCH_CPU_PROF_DIR'] = dir;
      }
      const result = await runGroup(group, log);
      log(`${group.name}: ${result.seconds} s`);
      results.push(result);
      if (args.profile) {
        const summary = summariseProfiles(join(profileRoot, group.name));
        if (summary) profiles[group.name] = summary;
      }
    }
  } finally {
    delete process.env['BENCH_CPU_PROF_DIR'];
    await stopAll();
  }

  machine['load_average_end'] = loadavg().map((x) => Math.round(x * 100) / 100);
  machine['seconds'] = Math.round((performance.now() - started) / 1000);
  const thisRun: GroupRun = {
    date: String(machine['date']),
    load_average_start: machine['load_average_start'] as number[],
    load_average_end: machine['load_average_end'] as number[],
    docket_commit: String(machine['docket_commit']),
  };

  const previous = args.merge ? readPrevious(join(args.out, 'latest.json'), args.quick) : null;
  const scenarios: Record<string, ScenarioResult> = {};
  const shownGroups: GroupResult[] = [];
  const groupRuns: Record<string, GroupRun> = {};
  for (const group of allGroups) {
    const i = groups.indexOf(group);
    if (i >= 0) {
      for (const row of group.rows) scenarios[row.scenario] = buildScenario(results[i]!, row);
      shownGroups.push(results[i]!);
      groupRuns[group.name] = thisRun;
    } else if (previous?.groups[group.name]) {
      const kept = previous.groups[group.name]!;
      for (const [name, scenario] of Object.entries(previous.scenarios)) if (scenario.group === group.name) scenarios[name] = scenario;
      shownGroups.push({ name: group.name, seconds: kept.seconds, systems: kept.systems });
      groupRuns[group.name] = previous.group_runs?.[group.name] ?? {
        date: String(previous.machine['date']),
        load_average_start: previous.machine['load_average_start'] as number[],
        load_average_end: previous.machine['load_average_end'] as number[],
        docket_commit: String(previous.machine['docket_commit']),
      };
    }
  }

  const json: BenchJson = {
    machine,
    config,
    scenarios,
    group_runs: groupRuns,
    ...(args.profile ? { profiles } : {}),
    groups: Object.fromEntries(shownGroups.map((r) => [r.name, { seconds: r.seconds, systems: r.systems }])),
  };
  const md = renderMarkdown(json);
  mkdirSync(args.out, { recursive: true });
  writeFileSync(join(args.out, 'latest.json'), `${JSON.stringify(json, null, 2)}\n`);
  writeFileSync(join(args.out, 'latest.md'), md);
  process.stdout.write(`${md}\n`);
  log(`wrote ${join(args.out, 'latest.json')} and latest.md in ${machine['seconds']} s`);
  // ioredis and nats sockets are closed; exit in case a peer library left a timer behind.
  process.exit(0);
}

main().catch((err: unknown) => {
  log(err instanceof Error ? (err.stack ?? err.message) : String(err));
  process.exit(1);
});
