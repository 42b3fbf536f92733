/**
 * The replay rows: a log of `foldJobs` x 8 valid job events (1,000,000 in the full run) is written
 * once into a fresh DOCKET stream, then read back with an ordered consumer in 10,000-message pulls
 *   - raw: count messages only (the substrate's read rate),
 *   - decode: read + docket's envelope decoder (JSON.parse and shape checks),
 *   - fold: read + decode + `evolveJob` into a per-job state map (what a replay does),
 * and folded from memory (pre-decoded envelopes) with `evolveJob` and, on a slice, with XState's
 * exported `transition()` as the reference. Every fold must accept every event and end with the
 * expected statuses, or the run fails.
 */
import { initialTransition, transition } from 'xstate';
import type { NatsConnection } from '@nats-io/nats-core';
import { evolveJob, INITIAL_JOB_STATE, jobMachine, jobRunMachine, type JobEvent, type JobState } from '../../machines/index.js';
import { startNatsServer, type TestNatsServer } from '../../test/support/nats-server.js';
import { measured, type Group, type Measurement } from '../lib/harness.js';
import { connectBench, freshStream, leanAppend, readAll } from '../lib/jetstream.js';
import { EVENTS_PER_JOB, forEachEvent, jobEvent, subjectOf } from '../lib/events.js';
import type { BenchConfig } from '../lib/config.js';

const PULL = 10_000;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

type Decode = (bytes: Uint8Array) => JobEvent;

async function loadDecoder(): Promise<{ decode: Decode; name: string }> {
  try {
    const codec = (await import(new URL('../../src/nats/codec.js', import.meta.url).href)) as {
      decodeEnvelope(bytes: Uint8Array): unknown;
      isJobEvent(env: unknown): boolean;
    };
    return {
      name: 'src/nats/codec.ts decodeEnvelope',
      decode: (bytes) => {
        const env = codec.decodeEnvelope(bytes);
        if (!codec.isJobEvent(env)) throw new Error('not a job event');
        return env as JobEvent;
      },
    };
  } catch {
    return { name: 'JSON.parse (src/nats/codec.ts not loadable)', decode: (bytes) => JSON.parse(decoder.decode(bytes)) as JobEvent };
  }
}

function jobIdOfSubject(subject: string): string {
  return subject.slice(subject.lastIndexOf('.') + 1);
}

/** Folds into a state map; throws if the machines refuse any event (the log is valid by construction). */
class Folder {
  readonly states = new Map<string, JobState>();
  rejected = 0;
  apply(jobId: string, event: JobEvent): void {
    const next = evolveJob(this.states.get(jobId) ?? INITIAL_JOB_STATE, event);
    if (next === null) this.rejected++;
    else this.states.set(jobId, next);
  }
  check(jobs: number): Record<string, number> {
    if (this.rejected > 0) throw new Error(`fold refused ${this.rejected} events of a valid log`);
    const counts: Record<string, number> = {};
    for (const s of this.states.values()) counts[s.job.value] = (counts[s.job.value] ?? 0) + 1;
    const failed = Math.floor(jobs / 10);
    if (this.states.size !== jobs || counts['failed'] !== failed || counts['succeeded'] !== jobs - failed) {
      throw new Error(`fold ended with ${JSON.stringify(counts)} for ${jobs} jobs`);
    }
    return counts;
  }
}

export function foldGroup(config: BenchConfig): Group {
  const jobs = config.foldJobs;
  const events = jobs * EVENTS_PER_JOB;
  let server: TestNatsServer | undefined;
  let nc: NatsConnection | undefined;
  let memoryLog: { ids: string[]; events: JobEvent[] } | undefined;
  let codec: { decode: Decode; name: string } | undefined;
  const roles = (): Record<string, number> => ({ bench: process.pid, nats: server!.process.pid! });
  const rate = (seconds: number, cpu: Measurement['cpu'], extra: Record<string, unknown> = {}): Measurement => ({
    values: { rate: events / seconds },
    ...(cpu ? { cpu } : {}),
    extra: { events, jobs, ...extra },
  });

  return {
    name: 'fold',
    async setup() {
      server = await startNatsServer();
      nc = await connectBench(server.url, 'bench-fold');
      codec = await loadDecoder();
      await freshStream(nc);
      const order: [number, number][] = [];
      forEachEvent(jobs, (job, k) => order.push([job, k]));
      const t0 = performance.now();
      // Filling needs no expectations: the log is valid by construction and written once.
      await leanAppend(nc, order.length, 1_024, (i) => {
        const [job, k] = order[i]!;
        return { subject: subjectOf(job), payload: encoder.encode(JSON.stringify(jobEvent(job, k))) };
      });
      process.stderr.write(`  fold: wrote ${order.length.toLocaleString('en-US')} events in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
      const ids: string[] = [];
      const evs: JobEvent[] = [];
      for (const [job, k] of order) {
        ids.push(jobIdOfSubject(subjectOf(job)));
        // Round-trip through JSON so the in-memory fold sees exactly what a decoder hands it.
        evs.push(JSON.parse(JSON.stringify(jobEvent(job, k))) as JobEvent);
      }
      memoryLog = { ids, events: evs };
    },
    async teardown() {
      memoryLog = undefined;
      await nc?.close();
      await server?.stop();
    },
    systems: {
      async read() {
        let bytes = 0;
        const m = await measured(roles(), () => readAll(nc!, PULL, (_s, data) => (bytes += data.length)));
        if (m.result !== events) throw new Error(`read ${m.result} of ${events}`);
        return rate(m.seconds, m.cpu, { pull: PULL, mean_event_bytes: Math.round(bytes / events) });
      },
      async read_decode() {
        let types = 0;
        const m = await measured(roles(), () => readAll(nc!, PULL, (_s, data) => (types += codec!.decode(data).type.length)));
        if (m.result !== events || types === 0) throw new Error(`read ${m.result} of ${events}`);
        return rate(m.seconds, m.cpu, { decoder: codec!.name });
      },
      async fold_jetstream() {
        const folder = new Folder();
        const m = await measured(roles(), () => readAll(nc!, PULL, (subject, data) => folder.apply(jobIdOfSubject(subject), codec!.decode(data))));
        const counts = folder.check(jobs);
        return rate(m.seconds, m.cpu, { decoder: codec!.name, final: counts });
      },
      async fold_memory() {
        const { ids, events: evs } = memoryLog!;
        const folder = new Folder();
        const m = await measured({ bench: process.pid }, async () => {
          for (let i = 0; i < evs.length; i++) folder.apply(ids[i]!, evs[i]!);
        });
        const counts = folder.check(jobs);
        return rate(m.seconds, m.cpu, { final: counts });
      },
      async xstate_transition() {
        // XState's exported transition() on both machines, on the first `xstateEvents` events:
        // the reference the derived fold must beat (and is proven equal to by a property test).
        const { ids, events: evs } = memoryLog!;
        const n = Math.min(config.xstateEvents, evs.length);
        const snaps = new Map<string, [unknown, unknown]>();
        const [job0] = initialTransition(jobMachine);
        const [run0] = initialTransition(jobRunMachine);
        let refused = 0;
        const m = await measured({ bench: process.pid }, async () => {
          for (let i = 0; i < n; i++) {
            const id = ids[i]!;
            const event = evs[i]!;
            const [job, run] = (snaps.get(id) ?? [job0, run0]) as [typeof job0, typeof run0];
            if (!job.can(event) || !run.can(event)) {
              refused++;
              continue;
            }
            snaps.set(id, [transition(jobMachine, job, event)[0], transition(jobRunMachine, run, event)[0]]);
          }
        });
        if (refused > 0) throw new Error(`transition() refused ${refused} events of a valid log`);
        return { values: { rate: n / m.seconds }, cpu: m.cpu, extra: { events: n, method: 'can() + transition() on both machines' } };
      },
    },
    rows: [
      {
        scenario: 'substrate.read_ordered',
        title: 'JetStream ordered-consumer read (10,000-message pulls)',
        unit: 'events/s',
        better: 'higher',
        docket: 'read.rate',
        note: 'raw substrate: messages counted, not decoded',
      },
      {
        scenario: 'fold.read_decode',
        title: 'replay read + envelope decode, no fold',
        unit: 'events/s',
        better: 'higher',
        docket: 'read_decode.rate',
        peer: 'read.rate',
        peerLabel: 'raw read',
      },
      {
        scenario: 'fold.jetstream',
        title: 'replay: read + decode + fold (evolveJob) from JetStream',
        unit: 'events/s',
        better: 'higher',
        docket: 'fold_jetstream.rate',
        peer: 'read.rate',
        peerLabel: 'raw read',
        target: { on: 'value', op: '>=', limit: 200_000, text: '≥ 200,000 events/s' },
      },
      {
        scenario: 'fold.memory',
        title: 'fold (evolveJob) of decoded events in memory',
        unit: 'events/s',
        better: 'higher',
        docket: 'fold_memory.rate',
        peer: 'xstate_transition.rate',
        peerLabel: "XState transition()",
        target: { on: 'value', op: '>=', limit: 200_000, text: '≥ 200,000 events/s' },
        note: "peer: XState's exported transition() + can() on both machines, on a slice of the same log",
      },
    ],
  };
}
