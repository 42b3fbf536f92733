#!/usr/bin/env node
// The CLI as built by `npm run build` (dist/, made by `prepare` on `npm ci` and by `npm pack`):
// plain Node, no TypeScript loader, so a command starts in a fraction of what tsx takes.
// `npm run docket -- <args>` runs the sources through tsx while developing.
import { existsSync } from 'node:fs';

const main = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  process.stderr.write('error unavailable: docket is not built (run "npm run build", or "npm run docket -- <args>" for the sources)\n');
  process.exit(1);
}
await import(main.href);
