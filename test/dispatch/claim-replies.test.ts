/**
 * Claims by request id (src/dispatch/claim-replies.ts): a resend gets the first answer's runs that
 * still hold their jobs, waits for an answer still being decided, and is a new claim once the
 * answer is let go (empty, past its lease, or all its runs ended). Time and "holds" are injected.
 */
import { describe, expect, test } from 'vitest';
import { ClaimReplies } from '../../src/dispatch/claim-replies.js';
import type { ClaimCommand, ClaimedJob } from '../../src/commands/schemas.js';

const QUEUE = 'q';

function job(runId: string): ClaimedJob {
  return { job_id: `job-${runId}`, run_id: runId, queue: QUEUE, key: null, params: {}, attempt: 1, max_attempts: 1, lease_ms: 1_000, fencing_token: 1 };
}

function setup() {
  let now = 0;
  const held = new Set<string>();
  const replies = new ClaimReplies((queue, runId) => queue === QUEUE && held.has(runId), () => now);
  return { replies, held, advance: (ms: number) => void (now += ms) };
}

const claim = (requestId: string | undefined, worker = 'w'): ClaimCommand => ({ worker, lease_ms: 1_000, ...(requestId === undefined ? {} : { request_id: requestId }) });

describe('ClaimReplies', () => {
  test('a resend gets the runs of the first answer that still hold their jobs', async () => {
    const { replies, held } = setup();
    held.add('r1').add('r2');
    replies.remember(QUEUE, claim('a'), Promise.resolve([job('r1'), job('r2')]));
    await Promise.resolve();
    expect(await replies.resent(QUEUE, claim('a'))).toEqual([job('r1'), job('r2')]);
    held.delete('r1');
    expect(await replies.resent(QUEUE, claim('a'))).toEqual([job('r2')]);
    // Another worker's, another queue's or an unnamed claim is not a resend.
    expect(replies.resent(QUEUE, claim('a', 'other'))).toBeUndefined();
    expect(replies.resent('other-queue', claim('a'))).toBeUndefined();
    expect(replies.resent(QUEUE, claim(undefined))).toBeUndefined();
  });

  test('a resend while the first is being decided waits for its answer', async () => {
    const { replies, held } = setup();
    let answer!: (jobs: ClaimedJob[]) => void;
    replies.remember(QUEUE, claim('a'), new Promise((resolve) => (answer = resolve)));
    const resent = replies.resent(QUEUE, claim('a'));
    expect(resent).toBeDefined();
    held.add('r1');
    answer([job('r1')]);
    expect(await resent).toEqual([job('r1')]);
  });

  test('empty and failed answers are not kept; a kept one goes after its lease or once its runs ended', async () => {
    const { replies, held, advance } = setup();
    replies.remember(QUEUE, claim('empty'), Promise.resolve([]));
    replies.remember(QUEUE, claim('failed'), Promise.reject(new Error('boom')));
    held.add('r1').add('r2');
    replies.remember(QUEUE, claim('leased'), Promise.resolve([job('r1')]));
    replies.remember(QUEUE, claim('ended'), Promise.resolve([job('r2')]));
    await new Promise((r) => setImmediate(r));
    expect(replies.resent(QUEUE, claim('empty'))).toBeUndefined();
    expect(replies.resent(QUEUE, claim('failed'))).toBeUndefined();
    expect(replies.size).toBe(2);
    // Past the claim's lease the run cannot have been kept alive by its worker: a new claim.
    advance(1_000);
    expect(replies.resent(QUEUE, claim('leased'))).toBeUndefined();
    // A sweep (at most once a second, run by remember) lets go of answers whose runs all ended.
    held.delete('r2');
    advance(1_000);
    replies.remember(QUEUE, claim('next'), Promise.resolve([]));
    expect(replies.size).toBe(1); // 'next', still being decided
  });
});
