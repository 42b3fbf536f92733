/**
 * `--profile`: every docket node the bench spawns runs with `--cpu-prof`, one directory per group,
 * and the profiles of a group are summarised here: self time by package or source file, and the
 * hottest functions. This is the "which process is on the CPU, doing what" behind a missed target.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly hitCount?: number;
  readonly children?: number[];
}

interface CpuProfile {
  readonly nodes: ProfileNode[];
  readonly startTime: number;
  readonly endTime: number;
  readonly samples?: number[];
  readonly timeDeltas?: number[];
}

/** A stack that is serving work: a command, a claim or a dispatch (start-up never is). */
const SERVING = /\/src\/(commands|dispatch|reactors)\//;

/**
 * Hits per node counted from the first sample whose stack is serving work, so the process's
 * start-up (module loading through tsx, the replay) stays out of a workload's profile.
 */
function servingHits(profile: CpuProfile): { hits: Map<number, number>; micros: number } | null {
  const { samples, timeDeltas } = profile;
  if (!samples || !timeDeltas || samples.length !== timeDeltas.length) return null;
  const parent = new Map<number, number>();
  const byId = new Map<number, ProfileNode>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const serving = (id: number): boolean => {
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      if (SERVING.test(byId.get(at)?.callFrame.url ?? '')) return true;
    }
    return false;
  };
  const hits = new Map<number, number>();
  let started = false;
  let micros = 0;
  for (let i = 0; i < samples.length; i++) {
    const id = samples[i]!;
    if (!started && !serving(id)) continue;
    started = true;
    micros += timeDeltas[i]!;
    hits.set(id, (hits.get(id) ?? 0) + 1);
  }
  return started ? { hits, micros } : null;
}

export interface ProfileSummary {
  readonly files: number;
  readonly sampled_s: number;
  /** Share of samples per package (node_modules/<pkg>), docket source folder, or V8 bucket. */
  readonly by_area: { area: string; share: number }[];
  readonly top_functions: { fn: string; where: string; share: number }[];
}

function areaOf(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  if (url.startsWith('node:')) return url.split('/')[0]!;
  const repo = /\/(src\/[^/]+|machines|bench)\//.exec(url);
  if (repo) return repo[1]!;
  return url.replace(/^file:\/\//, '').split('/').slice(-2).join('/');
}

export function summariseProfiles(dir: string, top = 15): ProfileSummary | null {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  } catch {
    return null;
  }
  if (files.length === 0) return null;
  const byArea = new Map<string, number>();
  const byFn = new Map<string, { fn: string; where: string; hits: number }>();
  let total = 0;
  let micros = 0;
  for (const file of files) {
    const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
    const window = servingHits(profile);
    // A process that never served (an empty-log start) has nothing to say about a workload.
    if (!window) continue;
    micros += window.micros;
    for (const node of profile.nodes) {
      const hits = window.hits.get(node.id) ?? 0;
      if (hits === 0) continue;
      const { functionName, url, lineNumber } = node.callFrame;
      if (functionName === '(idle)') continue;
      total += hits;
      const area = areaOf(url, functionName);
      byArea.set(area, (byArea.get(area) ?? 0) + hits);
      // tsx-compiled sources report line 0 for everything; a line number only where it means something.
      const path = url.replace(/^.*\/(node_modules\/|src\/|machines\/|bench\/)/, '$1');
      const where = url ? (lineNumber > 0 ? `${path}:${lineNumber + 1}` : path) : '';
      const key = `${functionName}@${where}`;
      const entry = byFn.get(key) ?? { fn: functionName || '(anonymous)', where, hits: 0 };
      entry.hits += hits;
      byFn.set(key, entry);
    }
  }
  if (total === 0) return null;
  const share = (hits: number): number => Math.round((hits / total) * 1000) / 10;
  return {
    files: files.length,
    sampled_s: Math.round(micros / 1e5) / 10,
    by_area: [...byArea.entries()].sort((a, b) => b[1] - a[1]).slice(0, top).map(([area, hits]) => ({ area, share: share(hits) })),
    top_functions: [...byFn.values()].sort((a, b) => b.hits - a.hits).slice(0, top).map((e) => ({ fn: e.fn, where: e.where, share: share(e.hits) })),
  };
}

export function profileMarkdown(group: string, summary: ProfileSummary): string {
  const areas = summary.by_area.map((a) => `${a.area} ${a.share}%`).join(', ');
  const fns = summary.top_functions.map((f) => `| ${f.share}% | \`${f.fn}\` | ${f.where} |`);
  return [
    `### ${group}: docket node CPU profile (${summary.files} process${summary.files > 1 ? 'es' : ''}, ${summary.sampled_s} s from the first command served to exit, idle excluded)`,
    '',
    `By area: ${areas}`,
    '',
    '| self | function | where |',
    '| --- | --- | --- |',
    ...fns,
    '',
  ].join('\n');
}
