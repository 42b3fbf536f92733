/**
 * The latency floor's leader in a process of its own (bench/lib/latency-floor.ts, path
 * `leader_process`): as a docket node is to a worker and a client that are not embedded in it.
 *
 *   node --import tsx bench/floor-leader.ts <nats url> <jobs>
 *
 * Prints `ready` once it listens; runs until killed.
 */
import { connect } from '@nats-io/transport-node';
import { floorCommits, serveFloorLeader } from './lib/latency-floor.js';

const [url, jobs] = process.argv.slice(2);
if (url === undefined || jobs === undefined) throw new Error('usage: floor-leader.ts <nats url> <jobs>');
const leader = await connect({ servers: url, name: 'floor-leader-process' });
await serveFloorLeader(leader, floorCommits(Number(jobs)), (err) => {
  process.stderr.write(`floor leader: ${String(err)}\n`);
  process.exit(1);
});
process.stdout.write('ready\n');
process.on('SIGTERM', () => void leader.close().finally(() => process.exit(0)));
