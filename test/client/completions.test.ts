/**
 * The Worker's completion batcher (src/client/completions.ts) with a scripted leader: every job a
 * reply claimed goes to `claimed` in the leader's order (the Worker runs or holds them), including
 * those no answered run takes, instead of being dropped to wait out their leases.
 */
import { describe, expect, test } from 'vitest';
import { CompletionBatcher, type CompletionOutcome } from '../../src/client/completions.js';
import type { ClaimedJob } from '../../src/commands/schemas.js';
import { DocketError, UnavailableError } from '../../src/errors.js';

const job = (n: number) => ({ job_id: `j${n}`, run_id: `r${n}` }) as unknown as ClaimedJob;

/** A batcher whose sends are answered, in order, by `replies` (an Error is thrown). */
function scripted(replies: readonly (Record<string, unknown> | Error)[]) {
  const sent: Record<string, unknown>[] = [];
  const claimed: ClaimedJob[] = [];
  let k = 0;
  const batcher = new CompletionBatcher(
    'complete',
    async <T>(_verb: string, body: unknown): Promise<T> => {
      sent.push(body as Record<string, unknown>);
      const reply = replies[k++];
      if (reply === undefined) throw new Error('no more scripted replies');
      if (reply instanceof Error) throw reply;
      return reply as T;
    },
    (max) => ({ worker: 'w', max, request_id: `q${sent.length}` }),
    () => 0,
    (jobs) => void claimed.push(...jobs),
  );
  return { batcher, sent, claimed };
}

describe('CompletionBatcher', () => {
  test('a single completion whose reply carries more jobs than its slot (claimed ahead): all go to claimed, in order, before the run is resolved', async () => {
    const { batcher, claimed } = scripted([{ status: 'succeeded', jobs: [job(1), job(2)] }]);
    const seenAtResolve: ClaimedJob[][] = [];
    const outcome: CompletionOutcome = await batcher.report({ run_id: 'a', job_id: 'ja' }).then((o) => (seenAtResolve.push([...claimed]), o));
    expect(outcome).toEqual({ status: 'succeeded' });
    expect(seenAtResolve).toEqual([[job(1), job(2)]]);
  });

  test('in a batch, the job claimed for a run answered unavailable goes to claimed with the others; the run is sent again without it', async () => {
    const { batcher, sent, claimed } = scripted([
      { runs: [{ ok: true, status: 'succeeded' }, { ok: false, error: { code: 'unavailable', message: 'moved' } }, { ok: true, status: 'succeeded' }], jobs: [job(1), job(2), job(3)] },
      { status: 'succeeded', jobs: [] },
    ]);
    // Reported in one turn: they go as one batch.
    const first = batcher.report({ run_id: 'a', job_id: 'ja' });
    const second = batcher.report({ run_id: 'b', job_id: 'jb' });
    const third = batcher.report({ run_id: 'c', job_id: 'jc' });
    expect(await first).toEqual({ status: 'succeeded' });
    expect(await third).toEqual({ status: 'succeeded' });
    expect(await second).toEqual({ status: 'succeeded' });
    expect(claimed).toEqual([job(1), job(2), job(3)]);
    expect(sent.map((s) => ('runs' in s ? (s['runs'] as unknown[]).length : 1))).toEqual([3, 1]);
  });

  test('a completion reported in a later turn is sent without waiting for the reply to the one in flight', async () => {
    const sent: unknown[] = [];
    const answers: ((reply: unknown) => void)[] = [];
    const batcher = new CompletionBatcher(
      'complete',
      <T>(_verb: string, body: unknown): Promise<T> => {
        sent.push(body);
        return new Promise<T>((resolve) => answers.push(resolve as (reply: unknown) => void));
      },
      () => undefined,
      () => 0,
    );
    const first = batcher.report({ run_id: 'a', job_id: 'ja' });
    await new Promise((resolve) => setImmediate(resolve));
    expect(sent).toHaveLength(1);
    const second = batcher.report({ run_id: 'b', job_id: 'jb' });
    await new Promise((resolve) => setImmediate(resolve));
    // Gathering behind a request in flight would split a commit's worth of completions in two
    // (the leader's next commit leaves before that reply comes back).
    expect(sent).toHaveLength(2);
    for (const answer of answers) answer({ status: 'succeeded' });
    expect(await first).toEqual({ status: 'succeeded' });
    expect(await second).toEqual({ status: 'succeeded' });
  });

  test('a run ending while no other run is going is sent before the I/O callbacks of its turn; with others going, after them, so theirs can join', async () => {
    const order = async (othersRunning: boolean): Promise<string[]> => {
      const seen: string[] = [];
      const batcher = new CompletionBatcher(
        'complete',
        async <T>(): Promise<T> => {
          seen.push('sent');
          return { status: 'succeeded' } as T;
        },
        () => undefined,
        () => 0,
        () => undefined,
        () => othersRunning,
      );
      // Stands for a callback already due in this turn: a reply or a live event read with the job's.
      setImmediate(() => seen.push('due callback'));
      await batcher.report({ run_id: 'a', job_id: 'ja' });
      await new Promise((resolve) => setImmediate(resolve));
      return seen;
    };
    expect(await order(false)).toEqual(['sent', 'due callback']);
    expect(await order(true)).toEqual(['due callback', 'sent']);
  });

  test('a send with no answer is sent again with the same next claim (same request id)', async () => {
    const { batcher, sent, claimed } = scripted([new UnavailableError('no answer'), { status: 'succeeded', jobs: [job(1)] }]);
    expect(await batcher.report({ run_id: 'a', job_id: 'ja' })).toEqual({ status: 'succeeded' });
    expect(claimed).toEqual([job(1)]);
    expect(sent).toHaveLength(2);
    expect(sent[1]!['next']).toEqual(sent[0]!['next']);
  });

  test('asking counts the jobs a next claim in flight asks for, and is back to 0 once it is answered, refused or given up', async () => {
    const answers: ((reply: unknown) => void)[] = [];
    const failures: ((err: Error) => void)[] = [];
    const batcher = new CompletionBatcher(
      'complete',
      <T>(): Promise<T> => new Promise<T>((resolve, reject) => {
        answers.push(resolve as (reply: unknown) => void);
        failures.push(reject);
      }),
      (max) => ({ worker: 'w', max: max + 2 }),
      () => 0,
    );
    const answered = batcher.report({ run_id: 'a', job_id: 'ja' });
    await new Promise((resolve) => setImmediate(resolve));
    // One run freed, two more claimed ahead.
    expect(batcher.asking).toBe(3);
    answers[0]!({ status: 'succeeded', jobs: [] });
    await answered;
    expect(batcher.asking).toBe(0);
    const refused = batcher.report({ run_id: 'b', job_id: 'jb' });
    await new Promise((resolve) => setImmediate(resolve));
    expect(batcher.asking).toBe(3);
    failures[1]!(new DocketError('stale_run', 'the run no longer holds its job'));
    expect(await refused).toMatchObject({ refused: { code: 'stale_run' } });
    expect(batcher.asking).toBe(0);
  });

  test('a completion given up after its sends failed leaves nothing asked for', async () => {
    const { batcher, sent } = scripted(Array.from({ length: 20 }, () => new UnavailableError('no leader')));
    expect(await batcher.report({ run_id: 'a', job_id: 'ja' })).toEqual({ undelivered: true });
    expect(sent).toHaveLength(20);
    expect(batcher.asking).toBe(0);
  });
});
