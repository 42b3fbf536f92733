/**
 * The audit on a thread of its own: receives packed batches of stored messages (./packed.ts) in
 * stream order, folds them through an Auditor, acknowledges each batch (the reader's flow
 * control), and posts the report when told the log has ended. Started by ./threaded.ts.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Auditor } from './audit.js';
import { unpack } from './packed.js';
import type { AuditOptions } from './types.js';

export type ToAuditWorker = { readonly type: 'batch'; readonly buffer: ArrayBuffer; readonly lastSeq: number } | { readonly type: 'end' };
export type FromAuditWorker =
  | { readonly type: 'ready' }
  | { readonly type: 'ack'; readonly lastSeq: number }
  | { readonly type: 'report'; readonly report: ReturnType<Auditor['report']> }
  | { readonly type: 'error'; readonly message: string };

const port = parentPort;
if (port) {
  const auditor = new Auditor((workerData as { options?: AuditOptions } | undefined)?.options ?? {});
  const push = (m: Parameters<Auditor['push']>[0]): void => auditor.push(m);
  port.on('message', (msg: ToAuditWorker) => {
    try {
      if (msg.type === 'batch') {
        unpack(msg.buffer, push);
        port.postMessage({ type: 'ack', lastSeq: msg.lastSeq } satisfies FromAuditWorker);
      } else {
        port.postMessage({ type: 'report', report: auditor.report() } satisfies FromAuditWorker);
      }
    } catch (err) {
      port.postMessage({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies FromAuditWorker);
    }
  });
  port.postMessage({ type: 'ready' } satisfies FromAuditWorker);
}
