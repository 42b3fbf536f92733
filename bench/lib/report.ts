/**
 * Turns group results into rows (median, min-max, peer, ratio, target) and renders them as the
 * markdown table printed on stdout and saved to bench/results/latest.{json,md}.
 */
import { formatNumber, median, type GroupResult, type RowDef, type CpuAccount } from './harness.js';

export interface ScenarioResult {
  readonly title: string;
  readonly unit: string;
  readonly better: 'higher' | 'lower';
  readonly status: 'ok' | 'not available' | 'error';
  readonly reason?: string;
  readonly docket: number | null;
  readonly docket_range: [number, number] | null;
  readonly peer: number | null;
  readonly peer_range: [number, number] | null;
  readonly peer_label: string | null;
  readonly peer_status?: string;
  /** docket / peer, medians. */
  readonly ratio: number | null;
  readonly target: string | null;
  readonly met: boolean | null;
  readonly runs: { docket: number | null; peer: number | null }[];
  readonly group: string;
  readonly note?: string;
}

interface Figure {
  readonly samples: number[];
  readonly unavailable?: string;
  readonly error?: string;
}

function figure(group: GroupResult, ref: string): Figure {
  const [system, metric] = ref.split('.') as [string, string];
  const result = group.systems[system];
  if (!result) return { samples: [], error: `no system ${system}` };
  const samples: number[] = [];
  for (const run of result.runs) {
    if (!run) continue;
    const inner = run.samples?.[metric];
    if (inner && inner.length > 0) samples.push(...inner);
    else if (run.values[metric] !== undefined && Number.isFinite(run.values[metric])) samples.push(run.values[metric]!);
  }
  // A staged run (large_queue) that stopped part-way names the stage and its error.
  const stageFailure = result.runs
    .map((run) => run?.extra)
    .find((extra) => extra !== undefined && extra['failed_stage'] !== undefined);
  const error = result.error ?? (samples.length === 0 && stageFailure ? `failed at "${String(stageFailure['failed_stage'])}": ${String(stageFailure['error']).split('\n')[0]}` : undefined);
  return {
    samples,
    ...(result.unavailable !== undefined ? { unavailable: result.unavailable } : {}),
    ...(error !== undefined ? { error } : {}),
  };
}

function range(xs: number[]): [number, number] | null {
  return xs.length ? [Math.min(...xs), Math.max(...xs)] : null;
}

export function buildScenario(group: GroupResult, row: RowDef): ScenarioResult {
  const d = figure(group, row.docket);
  const p = row.peer ? figure(group, row.peer) : null;
  const docket = d.samples.length ? median(d.samples) : null;
  const peer = p && p.samples.length ? median(p.samples) : null;
  const ratio = docket !== null && peer !== null && peer !== 0 ? docket / peer : null;
  let met: boolean | null = null;
  if (row.target) {
    const subject = row.target.on === 'value' ? docket : ratio;
    if (subject !== null) met = row.target.op === '>=' ? subject >= row.target.limit : subject <= row.target.limit;
  }
  const status = docket !== null ? 'ok' : d.unavailable !== undefined ? 'not available' : d.error !== undefined ? 'error' : 'not available';
  const reason = docket !== null ? undefined : (d.unavailable ?? d.error ?? 'no figure (a sub-step did not produce it)');
  const n = Math.max(d.samples.length, p?.samples.length ?? 0);
  const peerStatus = p && peer === null ? (p.unavailable ?? p.error ?? 'no figure') : undefined;
  return {
    title: row.title,
    unit: row.unit,
    better: row.better,
    status,
    ...(reason !== undefined ? { reason } : {}),
    docket,
    docket_range: range(d.samples),
    peer,
    peer_range: p ? range(p.samples) : null,
    peer_label: row.peerLabel ?? null,
    ...(peerStatus !== undefined ? { peer_status: peerStatus } : {}),
    ratio,
    target: row.target?.text ?? null,
    met,
    runs: Array.from({ length: n }, (_, i) => ({ docket: d.samples[i] ?? null, peer: p?.samples[i] ?? null })),
    group: group.name,
    ...(row.note !== undefined ? { note: row.note } : {}),
  };
}

function cell(value: number | null, r: [number, number] | null): string {
  if (value === null) return '—';
  const spread = r && r[0] !== r[1] ? ` (${formatNumber(r[0])}–${formatNumber(r[1])})` : '';
  return `**${formatNumber(value)}**${spread}`;
}

function shorten(text: string, max = 90): string {
  const one = text.replace(/\s+/g, ' ').trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

export function markdownTable(scenarios: Record<string, ScenarioResult>): string {
  const lines = [
    '| scenario | unit | docket: median (min–max) | peer | peer: median (min–max) | docket ÷ peer | target | met |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const [name, s] of Object.entries(scenarios)) {
    const docketCell = s.docket === null ? `${s.status}: ${shorten(s.reason ?? '', 70)}` : cell(s.docket, s.docket_range);
    const peerCell = s.peer_label === null ? '—' : s.peer === null ? `${shorten(s.peer_status ?? '—', 50)}` : cell(s.peer, s.peer_range);
    const ratio = s.ratio === null ? '—' : `${s.ratio.toFixed(2)}×`;
    const met = s.met === null ? (s.target ? '?' : '') : s.met ? 'yes' : '**no**';
    lines.push(`| \`${name}\` ${s.title} | ${s.unit} | ${docketCell} | ${s.peer_label ?? '—'} | ${peerCell} | ${ratio} | ${s.target ?? ''} | ${met} |`);
  }
  return lines.join('\n');
}

/**
 * Per group and system, the median run's CPU of each process as a share of one core, and after
 * it, when measured, the time its threads waited for a core, summed, as a share of the wall time ("58% · 9%").
 */
export function cpuTable(groups: GroupResult[]): string {
  const lines = ['| group | system | wall s | bench | node | nats-server | redis-server |', '| --- | --- | --- | --- | --- | --- | --- |'];
  for (const group of groups) {
    for (const [system, result] of Object.entries(group.systems)) {
      const accounts = result.runs.map((r) => r?.cpu).filter((c): c is CpuAccount => c !== undefined && c.wall_s > 0);
      if (accounts.length === 0) continue;
      const sorted = [...accounts].sort((a, b) => a.wall_s - b.wall_s);
      const mid = sorted[Math.floor((sorted.length - 1) / 2)]!;
      const share = (seconds: number): string => `${Math.round((seconds / mid.wall_s) * 100)}%`;
      const cell = (role: string): string => {
        const cpu = mid.cpu_s[role];
        if (cpu === undefined) return '—';
        // Runs before waits were measured have no wait_s; a role without one in a run that has them could not be read.
        if (mid.wait_s === undefined) return share(cpu);
        const waited = mid.wait_s[role];
        return waited === undefined ? `${share(cpu)} · ?` : `${share(cpu)} · ${share(waited)}`;
      };
      lines.push(`| ${group.name} | ${system} | ${mid.wall_s.toFixed(2)} | ${cell('bench')} | ${cell('node')} | ${cell('nats')} | ${cell('redis')} |`);
    }
  }
  return lines.join('\n');
}
