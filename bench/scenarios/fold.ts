/**
 * The replay rows: a log of `foldJobs` x 8 valid job events (1,000,000 in the full run) is written
 * once into a fresh DOCKET stream as log v2 commits (EVENTS_PER_COMMIT events each, one
 * partition, chained by prev_hash), then read back with an ordered consumer in 10,000-message
 * pulls; rates are in events/s:
 *   - raw: count commits only (the substrate's read rate),
 *   - decode: read + docket's commit decoder (one JSON.parse per commit) and each event's envelope check,
 *   - fold: read + decode + `evolveJob` into a per-job state map (what a replay does),
 * and folded from memory (pre-decoded envelopes) with `evolveJob` and, on a slice, with XState's
 * exported `transition()` as the reference. Every fold must accept every event and end with the
 * expected statuses, or the run fails.
 */
import { initialTransition, transition } from 'xstate';
import type { NatsConnection } from '@nats-io/nats-core';
import { jobMachine, jobRunMachine, type JobEvent, type JobState } from '../../machines/index.js';
import { docketModuleUrl } from '../lib/docket.js';
import { startNatsServer, type TestNatsServer } from '../../test/support/nats-server.js';
import { measured, type Group, type Measurement } from '../lib/harness.js';
import { connectBench, freshStream, leanAppend, readAll } from '../lib/jetstream.js';
import { CommitChain, EVENTS_PER_COMMIT, EVENTS_PER_JOB, forEachEvent, jobEvent, partitionSubjectOf } from '../lib/events.js';
import type { BenchConfig } from '../lib/config.js';

/** Commits per pull: 10,000 commits of ~33 KB per pull stalled a first read on 2.9.10 (src/store/read-log.ts). */
const PULL = 1_000;
const decoder = new TextDecoder();

/** A commit's payload to its job events (shape-checked), in order. */
type Decode = (bytes: Uint8Array) => readonly JobEvent[];

async function loadDecoder(): Promise<{ decode: Decode; name: string }> {
  try {
    const codec = (await import(docketModuleUrl('src/nats/codec.js'))) as {
      decodeCommit(bytes: Uint8Array): { events: readonly unknown[] };
      envelopeProblem(value: unknown): string | null;
      isJobEvent(env: unknown): boolean;
    };
    return {
      name: 'src/nats/codec.ts decodeCommit + envelopeProblem',
      decode: (bytes) => {
        const events = codec.decodeCommit(bytes).events;
        for (const env of events) if (codec.envelopeProblem(env) !== null || !codec.isJobEvent(env)) throw new Error('not a job event');
        return events as readonly JobEvent[];
      },
    };
  } catch {
    return { name: 'JSON.parse (src/nats/codec.ts not loadable)', decode: (bytes) => (JSON.parse(decoder.decode(bytes)) as { events: JobEvent[] }).events };
  }
}

/** The fast fold, from the same build as the decoder (bench/lib/docket.ts `fromBuild`). */
interface FoldMachines {
  evolveJob(state: JobState, event: JobEvent): JobState | null;
  readonly INITIAL_JOB_STATE: JobState;
}

/** Folds into a state map; throws if the machines refuse any event (the log is valid by construction). */
class Folder {
  readonly states = new Map<string, JobState>();
  rejected = 0;
  constructor(private readonly machines: FoldMachines) {}
  apply(jobId: string, event: JobEvent): void {
    const next = this.machines.evolveJob(this.states.get(jobId) ?? this.machines.INITIAL_JOB_STATE, event);
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
  let commitCount = 0;
  let machines: FoldMachines | undefined;
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
      machines = (await import(docketModuleUrl('machines/index.js'))) as FoldMachines;
      await freshStream(nc, undefined, ['docket.log.>']);
      const order: [number, number][] = [];
      forEachEvent(jobs, (job, k) => order.push([job, k]));
      const t0 = performance.now();
      // Filling needs no expectations: the log is valid by construction and written once, in
      // order (leanAppend asks for items in order, so the chain is built as it goes).
      const chain = new CommitChain();
      const commits = Math.ceil(order.length / EVENTS_PER_COMMIT);
      await leanAppend(nc, commits, 64, (c) => {
        const events = order.slice(c * EVENTS_PER_COMMIT, (c + 1) * EVENTS_PER_COMMIT).map(([job, k]) => jobEvent(job, k));
        return { subject: partitionSubjectOf(), payload: chain.next(events) };
      });
      process.stderr.write(`  fold: wrote ${order.length.toLocaleString('en-US')} events in ${commits.toLocaleString('en-US')} commits in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
      commitCount = commits;
      const ids: string[] = [];
      const evs: JobEvent[] = [];
      for (const [job, k] of order) {
        ids.push(jobEvent(job, k).aggregate.id);
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
        if (m.result !== commitCount) throw new Error(`read ${m.result} of ${commitCount} commits`);
        return rate(m.seconds, m.cpu, { pull: PULL, commits: commitCount, events_per_commit: EVENTS_PER_COMMIT, mean_event_bytes: Math.round(bytes / events) });
      },
      async read_decode() {
        let decoded = 0;
        const m = await measured(roles(), () => readAll(nc!, PULL, (_s, data) => (decoded += codec!.decode(data).length)));
        if (m.result !== commitCount || decoded !== events) throw new Error(`decoded ${decoded} of ${events} events`);
        return rate(m.seconds, m.cpu, { decoder: codec!.name });
      },
      async fold_jetstream() {
        const folder = new Folder(machines!);
        const m = await measured(roles(), () =>
          readAll(nc!, PULL, (_subject, data) => {
            for (const event of codec!.decode(data)) folder.apply(event.aggregate.id, event);
          }),
        );
        const counts = folder.check(jobs);
        return rate(m.seconds, m.cpu, { decoder: codec!.name, final: counts });
      },
      async fold_memory() {
        const { ids, events: evs } = memoryLog!;
        const folder = new Folder(machines!);
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
        title: `JetStream ordered-consumer read (1,000-commit pulls, ${EVENTS_PER_COMMIT} events per commit)`,
        unit: 'events/s',
        better: 'higher',
        docket: 'read.rate',
        note: 'raw substrate: commits counted, not decoded',
      },
      {
        scenario: 'fold.read_decode',
        title: 'replay read + commit decode, no fold',
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
        target: { on: 'value', op: '>=', limit: 250_000, text: '≥ 250,000 events/s' },
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
