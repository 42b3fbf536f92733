/**
 * The Queue machine (aggregate kind `queue`, id = the queue's name, partition `q.<queue>`): a queue
 * is `active` or `paused`, and carries the settings its leader's dispatcher enforces (flow
 * control). Pure: time and the actor arrive on the events.
 */
import { assign, setup } from 'xstate';
import type { Envelope } from './envelope.js';

/** At most `limit` claims in any window of `period_ms` (a sliding window over claim times). */
export interface RateLimit {
  readonly limit: number;
  readonly period_ms: number;
}

export interface QueueSettings {
  /** At most this many of the queue's jobs running at once, across all workers; null: no limit. */
  readonly concurrency: number | null;
  readonly rate: RateLimit | null;
  /** Per `concurrency_key` of a job: at most this many running at once. */
  readonly key_concurrency: number | null;
  readonly key_rate: RateLimit | null;
}

export const NO_QUEUE_SETTINGS: QueueSettings = { concurrency: null, rate: null, key_concurrency: null, key_rate: null };

/** A change of settings: a field left out keeps its value, null clears it. */
export type QueueSettingsChange = { readonly [K in keyof QueueSettings]?: QueueSettings[K] };

export type QueueEvent =
  | Envelope<'queue.paused', { readonly reason: string | null }>
  | Envelope<'queue.resumed', Record<string, never>>
  | Envelope<'queue.settings_changed', QueueSettingsChange>;

export const QUEUE_EVENT_TYPES = ['queue.paused', 'queue.resumed', 'queue.settings_changed'] as const satisfies readonly QueueEvent['type'][];

export type QueueStatus = 'active' | 'paused';

export interface QueueContext {
  readonly paused_reason: string | null;
  readonly paused_at: string | null;
  /** Who paused it: the event's actor, else the node that decided it. */
  readonly paused_by: string | null;
  readonly settings: QueueSettings;
}

export const EMPTY_QUEUE: QueueContext = { paused_reason: null, paused_at: null, paused_by: null, settings: NO_QUEUE_SETTINGS };

export function applyQueueEvent(context: QueueContext, event: QueueEvent): QueueContext {
  switch (event.type) {
    case 'queue.paused':
      return { ...context, paused_reason: event.data.reason, paused_at: event.time, paused_by: event.meta.actor ?? event.meta.node };
    case 'queue.resumed':
      return { ...context, paused_reason: null, paused_at: null, paused_by: null };
    case 'queue.settings_changed': {
      // Only the fields the event names change; JSON has no undefined, so a left-out field is absent.
      const settings = { ...context.settings };
      for (const name of Object.keys(NO_QUEUE_SETTINGS) as (keyof QueueSettings)[]) {
        if (name in event.data) (settings as Record<string, unknown>)[name] = event.data[name] ?? null;
      }
      return { ...context, settings };
    }
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

export const queueMachine = setup({
  types: { context: {} as QueueContext, events: {} as QueueEvent },
  actions: { apply: assign(({ context, event }) => applyQueueEvent(context, event)) },
}).createMachine({
  id: 'queue',
  initial: 'active',
  context: EMPTY_QUEUE,
  states: {
    active: {
      description: 'Its dispatcher hands out jobs (within the settings).',
      on: {
        'queue.paused': { target: 'paused', actions: 'apply' },
        'queue.settings_changed': { target: 'active', actions: 'apply' },
      },
    },
    paused: {
      description: 'Takes submits, hands out nothing: claims wait and are answered with no jobs.',
      on: {
        'queue.resumed': { target: 'active', actions: 'apply' },
        'queue.settings_changed': { target: 'paused', actions: 'apply' },
      },
    },
  },
});
