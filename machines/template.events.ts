/**
 * The events of a template (aggregate kind `template`, id = its name, partition `sys`): a named,
 * reusable job definition. Every put is a new revision, numbered from 1 and kept in the log, so a
 * job made from a template can name the exact definition it came from.
 */
import type { Envelope, JsonObject } from './envelope.js';
import type { BackoffPolicy } from './job.events.js';

export interface TemplatePutData {
  readonly name: string;
  /** 1 for the first put, then the previous revision + 1 (the machine refuses any other number). */
  readonly revision: number;
  readonly queue: string;
  /** Default params of its jobs; a submit's params are merged over them (shallow, by key). */
  readonly params: JsonObject;
  readonly priority?: number;
  readonly max_attempts?: number;
  readonly backoff?: BackoffPolicy;
  readonly lease_ms?: number;
  readonly description?: string;
}

export type TemplatePutEvent = Envelope<'template.put', TemplatePutData>;
export type TemplateArchivedEvent = Envelope<'template.archived', Record<string, never>>;

export type TemplateEvent = TemplatePutEvent | TemplateArchivedEvent;
export type TemplateEventType = TemplateEvent['type'];

export const TEMPLATE_EVENT_TYPES = ['template.put', 'template.archived'] as const satisfies readonly TemplateEventType[];
