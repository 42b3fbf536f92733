/**
 * For the tail's A/B scripts: a fresh nats-server and a docket node on it in a process of its own
 * (bench/tail-solo-node.ts), whose tail either always follows the stream or may go solo.
 */
import { spawn } from 'node:child_process';
import { startNatsServer } from '../../test/support/nats-server.js';

export type TailMode = 'follow' | 'solo';
export const TAIL_MODES: readonly TailMode[] = ['follow', 'solo'];

export interface TailNode {
  readonly url: string;
  readonly pid: number;
  /** The node's last report of `tail.following` ('true' or 'false'; it reports twice a second). */
  following(): string;
  stop(): Promise<void>;
}

/** Starts the node and returns 2.5 s after "serving", so that a node that may go solo has. */
export async function startTailNode(mode: TailMode): Promise<TailNode> {
  const server = await startNatsServer();
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/tail-solo-node.ts', server.url, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  let following = '';
  await new Promise<void>((resolve) =>
    child.stdout!.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      if (text.includes('serving')) resolve();
      following = /following=(\w+)\n$/.exec(text)?.[1] ?? following;
    }),
  );
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  return {
    url: server.url,
    pid: child.pid!,
    following: () => following,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
      await server.stop();
    },
  };
}
