/** Options every client command shares: where NATS is, and JSON output. */
import type { Command } from 'commander';

export interface CommonFlags {
  readonly server?: string;
  readonly json?: boolean;
}

export function withCommonOptions(command: Command): Command {
  return command
    .option('-s, --server <url>', 'NATS server URL (default: $NATS_URL, else nats://127.0.0.1:4222)')
    .option('--json', 'print JSON for scripts instead of tables');
}
