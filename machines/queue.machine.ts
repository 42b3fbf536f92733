/**
 * The Queue machine (aggregate kind `queue`, id = the queue's name, partition `q.<queue>`): a queue
 * is `active` or `paused`, and carries the settings its leader's dispatcher enforces (flow
 * control). Pure: time and the actor arrive on the events.
 */
import { assign, setup } from 'xstate';
import type { Envelope, JsonObject } from './envelope.js';

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

/**
 * A job set's definition (issue 14, DataJoint's jobs table of a computed table): where its keys
 * come from and which are computed, and its settings. A setting left out is not set, so docket's
 * default applies (src/jobsets/settings.ts). The sources are stored as given once validated
 * (src/commands/jobset-schemas.ts): a database URL never holds a password (refused there), the
 * password is read from `password_env` on the node that runs the query.
 */
export interface JobSetDefinition {
  readonly key_source: JsonObject;
  readonly target?: JsonObject;
  readonly attributes?: readonly string[];
  readonly keep_completed?: boolean;
  readonly stale_timeout_s?: number;
  readonly auto_refresh?: boolean;
  readonly default_priority?: number;
  readonly version?: string;
}

/** What a refresh did (seed 000's answer), kept on the queue: a resent refresh answers with it. */
export interface RefreshedCounts {
  readonly added: number;
  readonly removed: number;
  readonly orphaned: number;
  readonly re_pended: number;
}

export type QueueEvent =
  | Envelope<'queue.paused', { readonly reason: string | null }>
  | Envelope<'queue.resumed', Record<string, never>>
  | Envelope<'queue.settings_changed', QueueSettingsChange>
  | Envelope<'queue.jobset_put', JobSetDefinition>
  | Envelope<'queue.refreshed', RefreshedCounts>;

export const QUEUE_EVENT_TYPES = ['queue.paused', 'queue.resumed', 'queue.settings_changed', 'queue.jobset_put', 'queue.refreshed'] as const satisfies readonly QueueEvent['type'][];

/** How many refreshes' answers a queue keeps by event id (a resend of an older one is answered from the log's history alone). */
export const REFRESHES_KEPT = 20;

export type QueueStatus = 'active' | 'paused';

export interface QueueContext {
  readonly paused_reason: string | null;
  readonly paused_at: string | null;
  /** Who paused it: the event's actor, else the node that decided it. */
  readonly paused_by: string | null;
  readonly settings: QueueSettings;
  /** The queue is a job set (docket.cmd.jobset.put); null: a plain queue. */
  readonly jobset: JobSetDefinition | null;
  /** The latest refreshes (at most REFRESHES_KEPT, oldest first): their event ids, times and counts. */
  readonly refreshes: readonly { readonly event_id: string; readonly at: string; readonly counts: RefreshedCounts }[];
}

export const EMPTY_QUEUE: QueueContext = { paused_reason: null, paused_at: null, paused_by: null, settings: NO_QUEUE_SETTINGS, jobset: null, refreshes: [] };

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
    case 'queue.jobset_put':
      // A put replaces the whole definition: a setting it leaves out is no longer set.
      return { ...context, jobset: event.data };
    case 'queue.refreshed': {
      const { added, removed, orphaned, re_pended } = event.data;
      const entry = { event_id: event.id, at: event.time, counts: { added, removed, orphaned, re_pended } };
      return { ...context, refreshes: [...context.refreshes.slice(-(REFRESHES_KEPT - 1)), entry] };
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
        'queue.jobset_put': { target: 'active', actions: 'apply' },
        'queue.refreshed': { target: 'active', actions: 'apply' },
      },
    },
    paused: {
      description: 'Takes submits, hands out nothing: claims wait and are answered with no jobs.',
      on: {
        'queue.resumed': { target: 'active', actions: 'apply' },
        'queue.settings_changed': { target: 'paused', actions: 'apply' },
        // A paused job set still takes its definition and refreshes: they queue jobs, a pause
        // only stops handing them out.
        'queue.jobset_put': { target: 'paused', actions: 'apply' },
        'queue.refreshed': { target: 'paused', actions: 'apply' },
      },
    },
  },
});
