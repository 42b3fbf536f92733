/**
 * Raw substrate rows: how fast JetStream takes appends on this machine, through the lean path
 * docket's event store uses, through nats.js `js.publish()`, and through docket's own
 * `EventStore.append` (when present). All three append the same job.submitted envelopes, each to a
 * new job subject expecting sequence 0 with a unique `Nats-Msg-Id`, 1,024 in flight, into a
 * fresh file stream.
 */
import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { startNatsServer, type TestNatsServer } from '../../test/support/nats-server.js';
import { measured, NotAvailableError, pool, type CpuAccount, type Group, type Measurement } from '../lib/harness.js';
import { connectBench, envelopeBytes, freshStream, leanAppend, newJobAppend } from '../lib/jetstream.js';
import { jobEvent, subjectOf } from '../lib/events.js';
import type { BenchConfig } from '../lib/config.js';

const IN_FLIGHT = 1_024;

interface EventStoreLike {
  append(request: { subject: string; payload: Uint8Array; msgId: string; expectedSeq: number }): Promise<{ seq: number; duplicate: boolean }>;
  close(): Promise<void>;
}

export function substrateGroup(config: BenchConfig): Group {
  const n = config.appends;
  let server: TestNatsServer | undefined;
  let nc: NatsConnection | undefined;
  const roles = (): Record<string, number> => ({ bench: process.pid, nats: server!.process.pid! });
  // A different queue per run keeps subjects new, so every append really expects sequence 0.
  const queueFor = (system: string, rep: number): string => `append_${system}_${rep}`;
  const result = (seconds: number, cpu: CpuAccount): Measurement => ({
    values: { rate: n / seconds },
    cpu,
    extra: { appends: n, in_flight: IN_FLIGHT },
  });

  return {
    name: 'append',
    async setup() {
      server = await startNatsServer();
      nc = await connectBench(server.url, 'bench-append');
    },
    async teardown() {
      await nc?.close();
      await server?.stop();
    },
    systems: {
      async lean(rep) {
        await freshStream(nc!);
        const queue = queueFor('lean', rep);
        const m = await measured(roles(), () =>
          leanAppend(nc!, n, IN_FLIGHT, (i) => newJobAppend(subjectOf(i, queue), jobEvent(i, 0, queue))),
        );
        return result(m.seconds, m.cpu);
      },
      async js_publish(rep) {
        await freshStream(nc!);
        const js = jetstream(nc!);
        const queue = queueFor('js', rep);
        const m = await measured(roles(), () =>
          pool(n, IN_FLIGHT, async (i) => {
            const event = jobEvent(i, 0, queue);
            const ack = await js.publish(subjectOf(i, queue), envelopeBytes(event), {
              msgID: event.id,
              expect: { lastSubjectSequence: 0 },
            });
            if (ack.duplicate) throw new Error('unexpected duplicate');
          }),
        );
        return result(m.seconds, m.cpu);
      },
      async event_store(rep) {
        let mod: { EventStore: new (nc: NatsConnection) => EventStoreLike };
        try {
          mod = (await import(new URL('../../src/store/event-store.js', import.meta.url).href)) as typeof mod;
        } catch (err: unknown) {
          throw new NotAvailableError(`src/store/event-store.ts: ${err instanceof Error ? err.message : String(err)}`);
        }
        await freshStream(nc!);
        const store = new mod.EventStore(nc!);
        const queue = queueFor('store', rep);
        try {
          const m = await measured(roles(), () =>
            pool(n, IN_FLIGHT, async (i) => {
              const event = jobEvent(i, 0, queue);
              const appended = await store.append({ subject: subjectOf(i, queue), payload: envelopeBytes(event), msgId: event.id, expectedSeq: 0 });
              if (appended.duplicate) throw new Error('unexpected duplicate');
            }),
          );
          return result(m.seconds, m.cpu);
        } finally {
          await store.close();
        }
      },
    },
    rows: [
      {
        scenario: 'substrate.append_lean',
        title: 'JetStream append, lean core-publish path (1,024 in flight)',
        unit: 'appends/s',
        better: 'higher',
        docket: 'lean.rate',
        note: "raw substrate; docket's headers (Nats-Msg-Id, expected last subject sequence 0, expected stream) and encoding on every append",
      },
      {
        scenario: 'substrate.append_js_publish',
        title: 'JetStream append, nats.js js.publish (1,024 in flight)',
        unit: 'appends/s',
        better: 'higher',
        docket: 'js_publish.rate',
        peer: 'lean.rate',
        peerLabel: 'lean path',
        note: 'raw substrate; ratio = js.publish / lean path',
      },
      {
        scenario: 'substrate.append_event_store',
        title: "docket EventStore.append (1,024 in flight)",
        unit: 'appends/s',
        better: 'higher',
        docket: 'event_store.rate',
        peer: 'lean.rate',
        peerLabel: 'lean path',
        note: "docket's own append path (src/store/event-store.ts) against the raw lean path",
      },
    ],
  };
}
