/**
 * decide asks the XState machine itself (`can`), on a snapshot restored from a fold state with
 * `resolveState`. Rejections are values; src/commands turns them into errors.
 */
import type { AnyStateMachine, EventObject } from 'xstate';
import type { FoldState } from './fold.js';

export type Decision<E> =
  | { readonly ok: true; readonly event: E }
  | { readonly ok: false; readonly code: 'invalid_transition' | 'stale_run'; readonly reason: string };

// The last snapshot restored per machine: a batch of submits decides from the same (initial)
// state thousands of times, and restoring is most of the cost of a decision.
const lastResolved = new WeakMap<AnyStateMachine, { state: FoldState<unknown>; snapshot: ReturnType<AnyStateMachine['resolveState']> }>();

/** true when `machine`, in `state`, accepts `event` (guards evaluated, nothing run). */
export function machineAccepts<C, E extends EventObject>(machine: AnyStateMachine, state: FoldState<C>, event: E): boolean {
  let cached = lastResolved.get(machine);
  if (cached?.state !== state) {
    cached = { state, snapshot: machine.resolveState({ value: state.value, context: state.context as never }) };
    lastResolved.set(machine, cached);
  }
  return cached.snapshot.can(event as never);
}
