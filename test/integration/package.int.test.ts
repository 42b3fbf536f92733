/**
 * The package as a new user gets it: `npm pack`, install the tarball into an empty folder (its
 * dependencies come from the registry), then plain Node imports it and runs its bin: no tsx, no
 * sources. Needs no nats-server; it is an integration test because it installs from the network.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const run = promisify(execFile);

/** A user's environment: nothing from the npm process vitest may run under leaks into the child npm. */
function userEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
}

interface Output {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

async function exec(file: string, args: readonly string[], cwd: string): Promise<Output> {
  try {
    const { stdout, stderr } = await run(file, [...args], { cwd, env: userEnv(), maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: unknown; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('the packed package', () => {
  let work: string;
  let app: string;
  let tarball: string;
  let files: string[];

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'docket-pack-'));
    app = join(work, 'app');
    // --ignore-scripts: the suite's globalSetup has just built dist/, and `prepare` would delete
    // and rebuild it under the other test files' feet (they run bin/docket.js at the same time).
    const packed = await exec('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], ROOT);
    expect(packed.code, packed.stderr).toBe(0);
    const [info] = JSON.parse(packed.stdout) as { filename: string; files: { path: string }[] }[];
    tarball = join(work, info!.filename);
    files = info!.files.map((f) => f.path);
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'docket-user', private: true, type: 'module' }));
    const installed = await exec('npm', ['install', '--no-audit', '--no-fund', tarball], app);
    expect(installed.code, installed.stderr).toBe(0);
  }, 300_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('holds the build, the types, the bin, nats.conf and the JSON Schemas, and no tests or sources', () => {
    expect(files).toEqual(
      expect.arrayContaining(['dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/cli/main.js', 'dist/machines/index.js', 'bin/docket.js', 'nats.conf', 'package.json', 'schemas/cmd.submit.json', 'schemas/work.fail.json']),
    );
    expect(files.filter((f) => f.startsWith('test/') || f.startsWith('src/') || f.startsWith('bench/') || (f.endsWith('.ts') && !f.endsWith('.d.ts')))).toEqual([]);
    expect(readdirSync(join(app, 'node_modules', 'docket', 'dist', 'src'))).toContain('index.d.ts');
  });

  it('is imported by plain Node by its name', async () => {
    const script = "import('docket').then((m) => { console.log(JSON.stringify({ client: typeof m.Client.connect, worker: typeof m.Worker, node: typeof m.startNode })); })";
    const result = await exec(process.execPath, ['-e', script], app);
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({ client: 'function', worker: 'function', node: 'function' });
    // The schemas are reachable by the package's name too, for tools that read them from node_modules.
    const schema = await exec(process.execPath, ['-e', "console.log(require(require.resolve('docket/schemas/cmd.submit.json')).title)"], app);
    expect(schema.stdout.trim()).toBe('docket.cmd.submit request');
  });

  it('gives a TypeScript user its types (strict, no skipLibCheck)', async () => {
    writeFileSync(
      join(app, 'index.ts'),
      [
        "import { Client, Worker, type JobDetail, type WorkerJobContext } from 'docket';",
        "export const client: Promise<Client> = Client.connect({ servers: 'nats://127.0.0.1:4222' });",
        "export const worker = new Worker({ queue: 'q', handler: (job, ctx: WorkerJobContext) => { ctx.setExitCode(0); return { attempt: job.attempt }; } });",
        "export type Status = JobDetail['job']['status'];",
        '',
      ].join('\n'),
    );
    // @types/node from this checkout: the user's own would do, and this keeps the install small.
    const compilerOptions = { module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2023', strict: true, noEmit: true, types: ['node'], typeRoots: [join(ROOT, 'node_modules', '@types')] };
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions, include: ['index.ts'] }));
    const checked = await exec(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], app);
    expect(checked.stdout + checked.stderr).toBe('');
    expect(checked.code).toBe(0);
  });

  it('runs its bin without tsx: help, version, and a command that reaches for NATS', async () => {
    const bin = join(app, 'node_modules', '.bin', 'docket');
    expect(existsSync(join(app, 'node_modules', 'tsx'))).toBe(false);
    const help = await exec(bin, ['--help'], app);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toContain('work [options] <queue> <command...>');
    const version = await exec(bin, ['--version'], app);
    expect(version.stdout.trim()).toBe('0.1.0');
    // Nothing listens on port 1: the command loads the SDK from dist/ and says NATS is not there.
    const progress = await exec(bin, ['progress', '--server', 'nats://127.0.0.1:1'], app);
    expect(progress.code).toBe(1);
    expect(progress.stderr.trim()).toMatch(/^error unavailable: cannot connect to NATS at nats:\/\/127\.0\.0\.1:1/);
  });
});
