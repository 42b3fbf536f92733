/**
 * The Template machine: `new` -> `active` -> `archived`. An archived template refuses new jobs
 * (the submit and the schedule ticker read `value`); a later put makes it active again under the
 * next revision, so a name is never lost and revisions never repeat. Pure: time arrives on the
 * events. `templateFold` is the fast fold derived from this machine (fold.ts), proven equal to it
 * by test/machines/schedule.fold.props.test.ts.
 */
import { assign, setup } from 'xstate';
import type { Decision } from './decider.js';
import { machineAccepts } from './decider.js';
import { deriveFold, type FoldState } from './fold.js';
import type { TemplateEvent, TemplatePutData } from './template.events.js';

export type TemplateStatus = 'new' | 'active' | 'archived';

export interface TemplateContext {
  readonly name: string;
  /** 0 before the first put. */
  readonly revision: number;
  /** The definition in force: the latest put's data. */
  readonly spec: TemplatePutData | null;
  readonly created_at: string;
  readonly updated_at: string;
  readonly archived_at: string | null;
}

export const EMPTY_TEMPLATE: TemplateContext = { name: '', revision: 0, spec: null, created_at: '', updated_at: '', archived_at: null };

/** The context effect of every accepted template event: used by the machine and by the fold. */
export function applyTemplateEvent(context: TemplateContext, event: TemplateEvent): TemplateContext {
  switch (event.type) {
    case 'template.put':
      return {
        name: event.data.name,
        revision: event.data.revision,
        spec: event.data,
        created_at: context.revision === 0 ? event.time : context.created_at,
        updated_at: event.time,
        archived_at: null,
      };
    case 'template.archived':
      return { ...context, updated_at: event.time, archived_at: event.time };
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

type GuardArgs = { context: TemplateContext; event: TemplateEvent };

export const templateGuards = {
  /** Revisions are numbered from 1 without gaps: a put names the revision it makes. */
  isNextRevision: ({ context, event }: GuardArgs) => event.type === 'template.put' && event.data.revision === context.revision + 1 && (context.revision === 0 || event.data.name === context.name),
};

export const templateMachine = setup({
  types: { context: {} as TemplateContext, events: {} as TemplateEvent },
  guards: templateGuards,
  actions: { apply: assign(({ context, event }) => applyTemplateEvent(context, event)) },
}).createMachine({
  id: 'template',
  initial: 'new',
  context: EMPTY_TEMPLATE,
  states: {
    new: { description: 'No put yet.', on: { 'template.put': { guard: 'isNextRevision', target: 'active', actions: 'apply' } } },
    active: {
      description: 'Jobs may be made from the latest revision.',
      on: {
        'template.put': { guard: 'isNextRevision', target: 'active', actions: 'apply' },
        'template.archived': { target: 'archived', actions: 'apply' },
      },
    },
    archived: {
      description: 'New jobs refused; schedules naming it miss their ticks (archived_template). A put revives it as the next revision.',
      on: { 'template.put': { guard: 'isNextRevision', target: 'active', actions: 'apply' } },
    },
  },
});

export type TemplateState = FoldState<TemplateContext> & { readonly value: TemplateStatus };

export const templateFold = deriveFold<TemplateContext, TemplateEvent>(templateMachine, { apply: applyTemplateEvent });
export const INITIAL_TEMPLATE_STATE = templateFold.initialState as TemplateState;

/** Folds one event; null when the machine refuses it. */
export function evolveTemplate(state: TemplateState, event: TemplateEvent): TemplateState | null {
  return templateFold.step(state, event) as TemplateState | null;
}

/** Decides a candidate event by asking the machine; a refusal says why in a user's words. */
export function decideTemplate(state: TemplateState, candidate: TemplateEvent): Decision<TemplateEvent> {
  if (machineAccepts(templateMachine, state, candidate)) return { ok: true, event: candidate };
  const name = state.context.name || candidate.aggregate.id;
  if (candidate.type === 'template.put') {
    return { ok: false, code: 'invalid_transition', reason: `cannot put template ${name} as revision ${candidate.data.revision}: its next revision is ${state.context.revision + 1}` };
  }
  const why = state.value === 'new' ? 'it does not exist' : `it is already ${state.value}`;
  return { ok: false, code: 'invalid_transition', reason: `cannot archive template ${name}: ${why}` };
}
