/**
 * The audit row, when bench/audit-bench.ts exists (another part of docket owns it): whatever
 * `benchAuditVsRead(url)` measures on a fresh nats-server, shown beside the raw read rate.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startNatsServer } from '../../test/support/nats-server.js';
import { NotAvailableError, type Group, type Measurement } from '../lib/harness.js';
import { REPO } from '../lib/docket.js';

/**
 * Accepts the AuditBenchResult of bench/audit-bench.ts (per-pass `audits`, `audits_one_thread`
 * and `reads` become the samples), a plain number, or an object with `audit` and `read`.
 */
function toMeasurement(result: unknown): Measurement {
  if (typeof result === 'number') return { values: { audit: result } };
  if (result && typeof result === 'object') {
    const r = result as Record<string, unknown>;
    const nums = (key: string): number[] => (Array.isArray(r[key]) ? (r[key] as unknown[]).filter((x): x is number => typeof x === 'number') : []);
    const threaded = nums('audits');
    const inline = nums('audits_one_thread');
    const reads = nums('reads');
    // docket audit runs threaded or on one thread; each pass counts with the better of the two.
    const audits = threaded.map((a, i) => Math.max(a, inline[i] ?? 0));
    const audit = typeof r['audit'] === 'number' ? r['audit'] : audits.length ? Math.max(...audits) : undefined;
    const read = typeof r['read'] === 'number' ? r['read'] : undefined;
    if (audit !== undefined) {
      const samples: Record<string, number[]> = {};
      if (audits.length) samples['audit'] = audits;
      if (reads.length) samples['read'] = reads;
      return { values: { audit, ...(read !== undefined ? { read } : {}) }, samples, extra: { returned: r } };
    }
  }
  throw new Error(`benchAuditVsRead returned ${JSON.stringify(result)?.slice(0, 200)}`);
}

export function auditGroup(events: number, passes: number): Group {
  return {
    name: 'audit',
    // benchAuditVsRead writes its own log and makes several passes; one call gives the samples.
    reps: 1,
    systems: {
      async docket(): Promise<Measurement> {
        if (!existsSync(join(REPO, 'bench/audit-bench.ts'))) throw new NotAvailableError('bench/audit-bench.ts does not exist yet');
        let mod: { benchAuditVsRead?: (url: string, options?: { events?: number; passes?: number }) => Promise<unknown> };
        try {
          mod = (await import(new URL('../audit-bench.js', import.meta.url).href)) as typeof mod;
        } catch (err: unknown) {
          throw new NotAvailableError(`bench/audit-bench.ts failed to load: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
        }
        if (typeof mod.benchAuditVsRead !== 'function') throw new NotAvailableError('bench/audit-bench.ts exports no benchAuditVsRead');
        const nats = await startNatsServer();
        try {
          return toMeasurement(await mod.benchAuditVsRead(nats.url, { events, passes }));
        } finally {
          await nats.stop();
        }
      },
    },
    rows: [
      {
        scenario: 'audit.replay',
        title: `docket audit of a ${events.toLocaleString('en-US')}-event log (bench/audit-bench.ts) beside the raw read`,
        unit: 'events/s',
        better: 'higher',
        docket: 'docket.audit',
        peer: 'docket.read',
        peerLabel: 'raw read, same run',
      },
    ],
  };
}
