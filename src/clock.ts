/** Time comes from an injectable clock, never Date.now() inside logic, so tests can move it. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** For clocks moved by hand: called after every move, so timers can look again. */
  onChange?(listener: () => void): () => void;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests advance by hand. Listeners run on every change (timers re-arm from them). */
export class ManualClock implements Clock {
  private ms: number;
  private readonly listeners = new Set<() => void>();
  constructor(startMs = Date.parse('2026-01-01T00:00:00.000Z')) {
    this.ms = startMs;
  }
  now(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
    for (const listener of this.listeners) listener();
  }
  set(ms: number): void {
    this.ms = ms;
    for (const listener of this.listeners) listener();
  }
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

let lastMs = NaN;
let lastIso = '';

/**
 * ISO 8601 of an epoch time. Every event stamps one and a busy node stamps thousands within the
 * same millisecond, so the last one is reused (also one string held by the jobs of that ms).
 */
export function toIso(ms: number): string {
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString();
    lastMs = ms;
  }
  return lastIso;
}
