/**
 * The audit row, when bench/audit-bench.ts exists (another part of docket owns it): whatever
 * `benchAuditVsRead(url)` measures on a fresh nats-server, shown beside the raw read rate.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startNatsServer } from '../../test/support/nats-server.js';
import { NotAvailableError, type Group, type Measurement } from '../lib/harness.js';
import { REPO } from '../lib/docket.js';

/** Accepts a number, or an object naming the audit and read rates in any of the obvious ways. */
function toMeasurement(result: unknown): Measurement {
  if (typeof result === 'number') return { values: { audit: result } };
  if (result && typeof result === 'object') {
    const r = result as Record<string, unknown>;
    const pick = (...keys: string[]): number | undefined => {
      for (const key of keys) if (typeof r[key] === 'number') return r[key];
      return undefined;
    };
    const audit = pick('audit', 'audit_rate', 'auditRate', 'docket', 'rate', 'eventsPerSecond', 'events_per_s');
    const read = pick('read', 'read_rate', 'readRate', 'raw', 'peer', 'rawRead');
    if (audit !== undefined) return { values: { audit, ...(read !== undefined ? { read } : {}) }, extra: { returned: r } };
  }
  throw new Error(`benchAuditVsRead returned ${JSON.stringify(result)?.slice(0, 200)}`);
}

export function auditGroup(): Group {
  return {
    name: 'audit',
    systems: {
      async docket(): Promise<Measurement> {
        if (!existsSync(join(REPO, 'bench/audit-bench.ts'))) throw new NotAvailableError('bench/audit-bench.ts does not exist yet');
        let mod: { benchAuditVsRead?: (url: string) => Promise<unknown> };
        try {
          mod = (await import(new URL('../audit-bench.js', import.meta.url).href)) as typeof mod;
        } catch (err: unknown) {
          throw new NotAvailableError(`bench/audit-bench.ts failed to load: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
        }
        if (typeof mod.benchAuditVsRead !== 'function') throw new NotAvailableError('bench/audit-bench.ts exports no benchAuditVsRead');
        const nats = await startNatsServer();
        try {
          return toMeasurement(await mod.benchAuditVsRead(nats.url));
        } finally {
          await nats.stop();
        }
      },
    },
    rows: [
      {
        scenario: 'audit.replay',
        title: 'docket audit (replay through the machines, compare) beside the raw read',
        unit: 'events/s',
        better: 'higher',
        docket: 'docket.audit',
        peer: 'docket.read',
        peerLabel: 'raw read, same run',
      },
    ],
  };
}
