/**
 * decide asks the XState machine itself (`can`), on a snapshot restored from a fold state with
 * `resolveState`. Rejections are values; src/commands turns them into errors.
 */
import type { AnyStateMachine, EventObject } from 'xstate';
import type { FoldState } from './fold.js';

export type Decision<E> =
  | { readonly ok: true; readonly event: E }
  | { readonly ok: false; readonly code: 'invalid_transition' | 'stale_run'; readonly reason: string };

/** true when `machine`, in `state`, accepts `event` (guards evaluated, nothing run). */
export function machineAccepts<C, E extends EventObject>(machine: AnyStateMachine, state: FoldState<C>, event: E): boolean {
  const snapshot = machine.resolveState({ value: state.value, context: state.context as never });
  return snapshot.can(event as never);
}
