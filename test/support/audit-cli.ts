/**
 * A tiny entry for subprocess tests of the log commands (replay, audit, explain, export) before
 * src/cli/main.ts wires them: builds a commander program, registers them, parses argv, and
 * reports errors the way main does (`error <code>: <message>`, or `{ok:false,error}` with --json).
 * Run: npx tsx test/support/audit-cli.ts audit --server nats://... --json
 */
import { Command, CommanderError } from 'commander';
import { registerAuditCommands } from '../../src/cli/audit-commands.js';
import { DocketError } from '../../src/errors.js';

const argv = process.argv;
const json = argv.includes('--json');
const program = new Command('docket').exitOverride().configureOutput({ outputError: () => undefined });
registerAuditCommands(program);

function fail(code: string, message: string): void {
  if (json) process.stdout.write(`${JSON.stringify({ ok: false, error: { code, message } })}\n`);
  else process.stderr.write(`error ${code}: ${message}\n`);
  process.exitCode = 1;
}

try {
  await program.parseAsync(argv);
} catch (err) {
  if (err instanceof CommanderError) {
    if (err.exitCode === 0) process.exitCode = 0;
    else fail('invalid_request', err.message.replace(/^error: /, ''));
  } else if (err instanceof DocketError) {
    fail(err.code, err.message);
  } else {
    fail('internal', err instanceof Error ? (err.stack ?? err.message) : String(err));
  }
}
