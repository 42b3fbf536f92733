/**
 * A fast fold derived from an XState machine. `transition()` builds a throw-away actor per event
 * (~20k events/s); replays need ~10x that. This reads the machine's own transition definitions
 * once into a table (state -> event type -> candidates), and at fold time picks the first
 * candidate whose guard passes, using the machine's own guard and reducer functions. No rule is
 * restated here: a property test (test/machines/fold.props.test.ts) proves it equal to the machine
 * on accept/reject, value and context.
 *
 * Supported machine shape (checked when the table is built): flat (atomic top-level states),
 * named guards, and named actions each mapped to a context reducer.
 */
import type { AnyStateMachine, EventObject } from 'xstate';

export interface FoldState<C> {
  readonly value: string;
  readonly context: C;
}

type Guard<C, E> = (args: { context: C; event: E }) => boolean;
type Reducer<C, E> = (context: C, event: E) => C;

interface Candidate<C, E> {
  readonly guard: Guard<C, E> | null;
  readonly target: string | null;
  readonly reducers: readonly Reducer<C, E>[];
}

export interface Fold<C, E extends EventObject> {
  readonly initialState: FoldState<C>;
  /** The next state, or null when the machine refuses the event. */
  step(state: FoldState<C>, event: E): FoldState<C> | null;
  /** Whether the machine accepts the event in `state` (XState's `can()`): guards only, no context built. */
  accepts(state: FoldState<C>, event: E): boolean;
  /** The event types the machine handles anywhere. */
  readonly eventTypes: ReadonlySet<string>;
}

function nameOf(ref: unknown): string {
  if (typeof ref === 'string') return ref;
  if (ref && typeof ref === 'object' && 'type' in ref && typeof ref.type === 'string') return ref.type;
  throw new Error(`fold: only named guards and actions can be derived, got ${String(ref)}`);
}

/**
 * Builds the fold table from `machine`. `reducers` maps each action name the machine uses to the
 * same context reducer its `assign` calls; an action without one is an error at build time.
 */
export function deriveFold<C, E extends EventObject>(
  machine: AnyStateMachine,
  reducers: Readonly<Record<string, Reducer<C, E>>>,
): Fold<C, E> {
  const guards = machine.implementations.guards as Record<string, unknown>;
  const table = new Map<string, Map<string, Candidate<C, E>[]>>();
  const eventTypes = new Set<string>();

  for (const [key, node] of Object.entries(machine.root.states)) {
    if (Object.keys(node.states).length > 0) throw new Error(`fold: state ${key} is not atomic`);
    const byEvent = new Map<string, Candidate<C, E>[]>();
    for (const [eventType, definitions] of node.transitions) {
      eventTypes.add(eventType);
      byEvent.set(
        eventType,
        definitions.map((definition) => {
          let guard: Guard<C, E> | null = null;
          if (definition.guard !== undefined) {
            const name = nameOf(definition.guard);
            const impl = guards[name];
            if (typeof impl !== 'function') throw new Error(`fold: guard ${name} has no implementation`);
            guard = impl as Guard<C, E>;
          }
          const targets = definition.target ?? [];
          if (targets.length > 1) throw new Error(`fold: ${key} on ${eventType} has several targets`);
          const target = targets[0]?.key ?? null;
          // XState's can() refuses a transition with neither target nor actions (a "forbidden"
          // one); step and accepts would take it: such a machine cannot be derived.
          if (target === null && definition.actions.length === 0) throw new Error(`fold: ${key} on ${eventType} has neither a target nor actions`);
          const actionReducers = definition.actions.map((action) => {
            const name = nameOf(action);
            const reducer = reducers[name];
            if (!reducer) throw new Error(`fold: action ${name} has no reducer`);
            return reducer;
          });
          return { guard, target, reducers: actionReducers };
        }),
      );
    }
    table.set(key, byEvent);
  }

  const initial = machine.config.initial;
  const context = machine.config.context;
  if (typeof initial !== 'string' || typeof context === 'function' || context === undefined) {
    throw new Error('fold: the machine needs a string initial state and a plain context object');
  }

  return {
    initialState: { value: initial, context: context as C },
    eventTypes,
    step(state, event) {
      const candidates = table.get(state.value)?.get(event.type);
      if (!candidates) return null;
      for (const candidate of candidates) {
        if (candidate.guard && !candidate.guard({ context: state.context, event })) continue;
        let next = state.context;
        for (const reduce of candidate.reducers) next = reduce(next, event);
        const value = candidate.target ?? state.value;
        // An event that changes neither (a run machine seeing job.submitted, say) keeps the
        // state object: one fewer allocation per event and per job held in memory.
        return value === state.value && next === state.context ? state : { value, context: next };
      }
      return null;
    },
    accepts(state, event) {
      const candidates = table.get(state.value)?.get(event.type);
      if (!candidates) return false;
      return candidates.some((candidate) => !candidate.guard || candidate.guard({ context: state.context, event }));
    },
  };
}
