/** Child of bench/tail-solo-ab.ts: a docket node whose tail may go solo (`solo`) or always follows (`follow`). */
import { startNode } from '../src/node.js';

const [url, mode] = process.argv.slice(2);
const node = await startNode({ servers: url!, tail: mode === 'solo' ? {} : { soloAfterMs: Infinity } });
process.stdout.write('serving\n');
setInterval(() => process.stdout.write(`following=${node.tail.following}\n`), 500).unref();
process.once('SIGTERM', () => void node.close().then(() => process.exit(0)));
