/**
 * Schedules (issue 13, Performance): 10,000 schedules firing every second on one node. They are
 * put with a common start_at a little later (so the puts do not compete with the fires), each
 * names its own job in one queue (`overlap: allow_all`, no worker: every tick fires and
 * its job stays queued, so the row measures the ticker, the sys writer and the submit path of
 * fired jobs, not a worker). After the puts and a warm-up, the node's CPU is measured over a
 * window; then the log is read and each tick of the window is matched with its job:
 * fire lag = the later of the stored time of the commit holding the job's `job.submitted` and
 * the job's run_at, minus the tick: a tick fired ahead (the ticker's lead) is committed before
 * its tick but claimable only at it, so it lags 0, never less (README "Performance"). A tick of
 * the window without its job counts as `missing`.
 */
import { connect } from '@nats-io/transport-node';
import { measured, pool, sleep, percentile, type Group, type Measurement } from '../lib/harness.js';
import { connectClient } from '../lib/docket.js';
import { withDocket, type BenchEnv } from '../lib/env.js';
import { readLogBatches } from '../../src/store/read-log.js';

interface ScheduleClient {
  putSchedule(schedule: { name: string; job: { queue: string }; cron: string; overlap: 'allow_all'; start_at: string }): Promise<unknown>;
}

interface LoggedCommit {
  readonly events: readonly { readonly type: string; readonly data: { readonly job_id?: string; readonly tick?: string; readonly run_at?: string; readonly schedule?: { readonly tick: string } } }[];
}

const QUEUE = 'ticks';
/** Schedules put at once (sys commands in flight). */
const PUT_WINDOW = 64;
const WARMUP_MS = 3_000;
/** Time allowed per put before the schedules start (start_at): the puts are not measured, and go faster before anything fires. */
const PUT_BUDGET_MS = 5;

/**
 * Per tick of the window: when its fire and its job were committed (stored times); and how many
 * fired jobs were committed within [busyFrom, busyTo] (any tick: the node's throughput then).
 */
async function lagsFromLog(url: string, fromTick: number, toTick: number, busyFrom: number, busyTo: number): Promise<{ job: number[]; fire: number[]; committed: number }> {
  const nc = await connect({ servers: url });
  const inWindow = (tick: string): boolean => {
    const t = Date.parse(tick);
    return t >= fromTick && t < toTick;
  };
  try {
    const job: number[] = [];
    const fire: number[] = [];
    let committed = 0;
    const decoder = new TextDecoder();
    for (const [filter, into] of [
      [`docket.log.q.${QUEUE}`, job],
      ['docket.log.sys', fire],
    ] as const) {
      for await (const batch of readLogBatches(nc, { filter })) {
        for (const m of batch) {
          const commit = JSON.parse(decoder.decode(m.data)) as LoggedCommit;
          for (const e of commit.events) {
            const tick = e.type === 'job.submitted' ? e.data.schedule?.tick : e.type === 'schedule.fired' ? e.data.tick : undefined;
            if (tick === undefined) continue;
            if (into === job && m.time >= busyFrom && m.time <= busyTo) committed += 1;
            // A job is there for a worker from the later of its commit and its run_at.
            const ready = into === job && e.data.run_at !== undefined ? Math.max(m.time, Date.parse(e.data.run_at)) : m.time;
            if (inWindow(tick)) into.push(ready - Date.parse(tick));
          }
        }
      }
    }
    return { job, fire, committed };
  } finally {
    await nc.close();
  }
}

async function docketSchedules(env: BenchEnv, schedules: number, windowMs: number): Promise<Measurement> {
  return withDocket(env, async (run) => {
    const client = (await connectClient(run.url)) as unknown as ScheduleClient & { close(): Promise<void> };
    try {
      const putStarted = performance.now();
      const startAt = Math.ceil((Date.now() + 5_000 + schedules * PUT_BUDGET_MS) / 1000) * 1000;
      // The sys partition gets a leader on its first command (and a loaded node may lose it a moment): retried.
      const put = async (i: number): Promise<void> => {
        for (let attempt = 0; ; attempt++) {
          try {
            await client.putSchedule({ name: `s${i}`, job: { queue: QUEUE }, cron: '* * * * * *', overlap: 'allow_all', start_at: new Date(startAt).toISOString() });
            return;
          } catch (err) {
            if (attempt >= 50 || !(err instanceof Error) || !/unavailable|no leader/i.test(`${err.name} ${err.message}`)) throw err;
            await sleep(200);
          }
        }
      };
      await put(0);
      await pool(schedules - 1, PUT_WINDOW, (i) => put(i + 1));
      const putSeconds = (performance.now() - putStarted) / 1000;
      await sleep(Math.max(0, startAt - Date.now()) + WARMUP_MS);
      // The window's ticks: whole seconds from the first after its start to the last before its end.
      const fromTick = Math.ceil(Date.now() / 1000) * 1000;
      const busyFrom = Date.now();
      const m = await measured(run.roles(), () => sleep(windowMs));
      const busyTo = Date.now();
      const toTick = Math.floor(busyTo / 1000) * 1000;
      // Let the window's last fires reach their jobs before reading.
      await sleep(2_000);
      const readAt = Date.now();
      const lags = await lagsFromLog(run.url, fromTick, toTick, busyFrom, busyTo);
      const expected = schedules * ((toTick - fromTick) / 1000);
      const missing = expected - lags.job.length;
      // A tick still without its job when the read began lags at least until then (a lower bound: the window's last tick's).
      for (let i = 0; i < missing; i++) lags.job.push(readAt - toTick);
      const nodeCpu = m.cpu.cpu_s['node'] ?? 0;
      const values = {
        p50: percentile(lags.job, 50),
        p99: percentile(lags.job, 99),
        max: percentile(lags.job, 100),
        fire_p99: percentile(lags.fire, 99),
        node_cpu_pct: Math.round((nodeCpu / m.seconds) * 1000) / 10,
        // The node's CPU per fire of the window (its schedule.fired and its job): what a core can sustain, whatever the machine's load.
        node_cpu_us_per_fire: lags.committed === 0 ? Number.NaN : Math.round((nodeCpu * 1e6) / lags.committed),
        missing,
      };
      return { values, cpu: m.cpu, extra: { schedules, window_s: m.seconds, ticks: expected, jobs_committed_in_window: lags.committed, fires: lags.fire.length, put_s: Math.round(putSeconds * 10) / 10, node: run.node.mode } };
    } finally {
      await client.close();
    }
  });
}

export function schedulesGroup(env: BenchEnv): Group {
  const schedules = env.config.quick ? 1_000 : 10_000;
  const windowMs = env.config.quick ? 10_000 : 20_000;
  const title = `${schedules.toLocaleString('en-US')} schedules firing every second on one node (own job, allow_all, no worker), ${windowMs / 1000} s window`;
  const note = 'lag = the later of the stored time of the commit holding the job.submitted and its run_at, minus the tick, every tick of the window (a tick without its job when the log is read counts the time until then); CPU = the node process over the window; µs per fire = that CPU over the fired jobs committed in the window';
  return {
    name: 'schedules',
    systems: { docket: () => docketSchedules(env, schedules, windowMs) },
    rows: [
      { scenario: 'schedules.fire_lag_p99', title: `${title}: fire lag p99 (tick → job committed)`, unit: 'ms', better: 'lower', docket: 'docket.p99', target: { on: 'value', op: '<=', limit: 100, text: '≤ 100 ms' }, note },
      { scenario: 'schedules.fire_lag_p50', title: `${title}: fire lag p50`, unit: 'ms', better: 'lower', docket: 'docket.p50' },
      { scenario: 'schedules.fire_commit_p99', title: `${title}: tick → schedule.fired committed, p99`, unit: 'ms', better: 'lower', docket: 'docket.fire_p99', note: 'negative: the fire was committed before its tick (fired ahead)' },
      { scenario: 'schedules.node_cpu', title: `${title}: the node's CPU`, unit: '% of a core', better: 'lower', docket: 'docket.node_cpu_pct' },
      { scenario: 'schedules.node_cpu_per_fire', title: `${title}: the node's CPU per fire (fire + job)`, unit: 'µs', better: 'lower', docket: 'docket.node_cpu_us_per_fire', note: 'at 10,000 fires per second one core sustains the rate only below 100 µs per fire' },
      { scenario: 'schedules.missing', title: `${title}: ticks of the window without their job`, unit: 'ticks', better: 'lower', docket: 'docket.missing', target: { on: 'value', op: '<=', limit: 0, text: 'none' } },
    ],
  };
}
