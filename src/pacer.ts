/**
 * Long background work on the node's one thread (a checkpoint's whole rewrite of a million jobs
 * takes seconds of CPU) shares it with the commands beside it: the work asks `due()` as it goes,
 * and when its slice (wall time since its last pause, its own awaits included) is used up it
 * awaits `pause()`, which hands the event loop over for a turn. While those turns hold other work
 * (claims, appends, lease renewals: IDLE_TURN_MS or more of it), the pause lasts until the others
 * have had `othersShare` times the slice; a turn with less ends it at once. So an idle node runs
 * the work at full speed, and a busy one gives it at most 1 / (1 + othersShare) of the thread,
 * never nothing: a checkpoint still ends under any load. A slice is also how long a command
 * waits behind the paced steps, so it is short: claims from a million queued jobs during the
 * checkpoint after their fill ran at ~0.6x of the small queue's with 2 ms slices, ~1.1x with
 * 0.5 ms, and 0.40x before the write was paced (`npm run bench -- --only large_queue`). Steps
 * that are not split (a sort of the rows, one JSON chunk) still hold the loop for their length.
 */

export interface PacerOptions {
  /** The work's CPU between two pauses. @defaultValue 0.5 ms */
  readonly sliceMs?: number;
  /** What others get per slice of the work while they have something to do. @defaultValue 3 */
  readonly othersShare?: number;
  /** The clock, in ms. @defaultValue performance.now */
  readonly now?: () => number;
}

/** A turn shorter than this held no other work worth waiting for (~10-30 µs is a bare turn's cost). */
const IDLE_TURN_MS = 0.2;

export class Pacer {
  private readonly sliceMs: number;
  private readonly othersShare: number;
  private readonly now: () => number;
  private sliceStart: number;

  constructor(options: PacerOptions = {}) {
    this.sliceMs = options.sliceMs ?? 0.5;
    this.othersShare = options.othersShare ?? 3;
    this.now = options.now ?? (() => performance.now());
    this.sliceStart = this.now();
  }

  /** Whether the slice is used up (then await `pause()`). A clock read (~40 ns): a call per record costs ~2% of a checkpoint's line. */
  due(): boolean {
    return this.now() - this.sliceStart >= this.sliceMs;
  }

  /** Hands the loop to other work: for a turn, or while it has work, up to its share. */
  async pause(): Promise<void> {
    let owed = (this.now() - this.sliceStart) * this.othersShare;
    for (;;) {
      const before = this.now();
      await new Promise<void>((resolve) => setImmediate(resolve));
      const turn = this.now() - before;
      owed -= turn;
      if (turn < IDLE_TURN_MS || owed <= 0) break;
    }
    this.sliceStart = this.now();
  }
}
