/**
 * The pacer on its own, on a clock of its test's: a slice is used up when its time has passed; a
 * pause gives the loop one turn when nothing else waits, and while other work keeps the loop
 * busy, lasts until that work has had `othersShare` times the slice.
 */
import { describe, expect, test } from 'vitest';
import { Pacer } from '../src/pacer.js';

function clock(): { now: () => number; advance: (ms: number) => void } {
  let ms = 0;
  return { now: () => ms, advance: (by) => (ms += by) };
}

describe('Pacer', () => {
  test('a slice is due once its time has passed, and starts again after a pause', async () => {
    const c = clock();
    const pacer = new Pacer({ sliceMs: 2, now: c.now });
    expect(pacer.due()).toBe(false);
    c.advance(1.9);
    expect(pacer.due()).toBe(false);
    c.advance(0.1);
    expect(pacer.due()).toBe(true);
    await pacer.pause();
    expect(pacer.due()).toBe(false);
  });

  test('with nothing else to do, a pause is one turn of the loop', async () => {
    const c = clock();
    const pacer = new Pacer({ sliceMs: 2, othersShare: 3, now: c.now });
    c.advance(2);
    let ran = false;
    setImmediate(() => (ran = true));
    await pacer.pause();
    // The turn ran what was waiting, and took no time on this clock: the work goes on.
    expect(ran).toBe(true);
    expect(c.now()).toBe(2);
  });

  test('while other work keeps the loop busy, a pause lasts until it has had its share', async () => {
    const c = clock();
    const pacer = new Pacer({ sliceMs: 2, othersShare: 3, now: c.now });
    c.advance(2);
    // Other work: a task each turn, each taking 1 ms.
    let turns = 0;
    let busy = true;
    const work = () => {
      if (!busy) return;
      turns += 1;
      c.advance(1);
      setImmediate(work);
    };
    setImmediate(work);
    await pacer.pause();
    busy = false;
    // 2 ms of slice x 3: the others had 6 ms (6 turns of 1 ms) before the work went on.
    expect(turns).toBeGreaterThanOrEqual(6);
    expect(turns).toBeLessThanOrEqual(7);
  });
});
