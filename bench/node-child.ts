/**
 * A docket node in its own process for the benchmark, used when the CLI (`src/cli/main.ts up`)
 * is not there yet: `node --import tsx bench/node-child.ts <nats url> <data dir>`. It logs JSON
 * lines on stderr (`msg: "serving"` when ready) and closes the node on SIGTERM, as `docket up` does.
 */
const [url, dataDir] = process.argv.slice(2);
if (!url || !dataDir) {
  process.stderr.write('usage: node-child.ts <nats url> <data dir>\n');
  process.exit(2);
}

const { startNode } = (await import(new URL('../src/node.js', import.meta.url).href)) as {
  startNode(options: { servers: string; dataDir: string; logger?: unknown }): Promise<{ close(): Promise<void> }>;
};
let logger: unknown;
try {
  const { createLogger } = (await import(new URL('../src/logger.js', import.meta.url).href)) as { createLogger(c: { level: string }): unknown };
  logger = createLogger({ level: 'info' });
} catch {
  logger = undefined;
}
const node = await startNode(logger === undefined ? { servers: url, dataDir } : { servers: url, dataDir, logger });
// The node logs 'serving' itself through the logger; this line is for a node without one.
if (logger === undefined) process.stderr.write(`${JSON.stringify({ msg: 'serving' })}\n`);

let closing = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (closing) return;
    closing = true;
    node.close().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`close failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  });
}
