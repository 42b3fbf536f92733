/**
 * The `docket` command line. Only the module of the command being run is loaded, and its action
 * imports what it needs (the SDK client, or the node) when it runs, so a CLI process starts fast.
 *
 * Exit codes: 0 done; 1 an error (a DocketError prints `error <code>: <message>` on stderr, or
 * `{ok:false,error}` on stdout with `--json`) or a usage error (`invalid_request`).
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { DocketError } from '../errors.js';
import { packageFile } from './package-files.js';
import { writeError } from './render.js';

type Register = (program: Command) => void;

/**
 * Each module registers a few commands; only the one a command line names is imported (the audit
 * commands alone take a second to load). A name not listed here loads every module, so a command
 * missing from this table still works, only slower; `--help` lists everything.
 */
const COMMAND_MODULES: readonly { readonly names: readonly string[]; load(): Promise<Register> }[] = [
  { names: ['up'], load: async () => (await import('./up.js')).registerUp },
  { names: ['submit', 'jobs', 'show', 'cancel', 'progress'], load: async () => (await import('./job-commands.js')).registerJobCommands },
  { names: ['tail'], load: async () => (await import('./tail.js')).registerTail },
  { names: ['replay', 'audit', 'explain', 'export'], load: async () => (await import('./audit-commands.js')).registerAuditCommands },
  { names: ['work', 'retry', 'move'], load: async () => (await import('./work-commands.js')).registerWorkCommands },
  { names: ['pause', 'resume', 'queue', 'reserve', 'release', 'renew', 'reservations', 'run-direct', 'group'], load: async () => (await import('./flow-commands.js')).registerFlowCommands },
  { names: ['retry-all', 'cancel-all', 'clean'], load: async () => (await import('./bulk-commands.js')).registerBulkCommands },
  { names: ['schedule', 'template'], load: async () => (await import('./schedule-commands.js')).registerScheduleCommands },
  { names: ['jobset', 'refresh'], load: async () => (await import('./jobset-commands.js')).registerJobSetCommands },
  { names: ['populate'], load: async () => (await import('./populate.js')).registerPopulateCommand },
];

/** Past the end of a command, the process exits even if a handle (a socket) lingers. */
const EXIT_GRACE_MS = 3_000;

function version(): string {
  try {
    const file = packageFile('package.json');
    if (file === undefined) return '0.0.0';
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/** The program with the commands `argv` needs (all of them when it names none we know). */
export async function buildProgram(argv: readonly string[] = process.argv): Promise<Command> {
  const program = new Command('docket')
    .description('a durable, event-sourced job scheduler on NATS JetStream')
    .version(version(), '-V, --version')
    .exitOverride()
    .configureOutput({ outputError: () => undefined });
  const name = argv.slice(2).find((arg) => !arg.startsWith('-'));
  const owner = COMMAND_MODULES.find((m) => name !== undefined && m.names.includes(name));
  const versionOnly = name === undefined && (argv.includes('-V') || argv.includes('--version'));
  const registers = versionOnly ? [] : await Promise.all((owner ? [owner] : COMMAND_MODULES).map((m) => m.load()));
  for (const register of registers) register(program);
  return program;
}

function errorOutput(err: unknown): { code: string; message: string; details?: Record<string, unknown> } {
  if (err instanceof DocketError) return err.toBody();
  const error = err instanceof Error ? err : new Error(String(err));
  return { code: 'internal', message: error.message };
}

export async function main(argv: readonly string[] = process.argv): Promise<number> {
  const json = argv.includes('--json');
  try {
    const program = await buildProgram(argv);
    await program.parseAsync([...argv]);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version end here (0); so does help shown for a bare `docket` (1).
      if (err.exitCode === 0 || err.code === 'commander.help') return err.exitCode;
      writeError({ code: 'invalid_request', message: err.message.replace(/^error: /, '') }, json);
      return 1;
    }
    const output = errorOutput(err);
    writeError(output, json);
    if (output.code === 'internal' && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
    return 1;
  }
}

/**
 * `docket progress | head -3`: once the reader has gone, the rest of the output has nowhere to go
 * and the command nothing left to do. Exit quietly with the status so far, as `cat` does.
 */
function exitQuietlyOnClosedPipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
  });
}
exitQuietlyOnClosedPipe(process.stdout);
exitQuietlyOnClosedPipe(process.stderr);

const code = await main();
process.exitCode = code;
setTimeout(() => process.exit(code), EXIT_GRACE_MS).unref();
