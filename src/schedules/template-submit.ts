/**
 * A submit that names a template (`template: <name>` in a job spec). Two steps:
 * - on the node the request reached, before validation: a job without a `queue` gets the
 *   template's (the queue decides which leader the job goes to);
 * - on the queue's leader, as the job is made: the template's params with the submit's merged
 *   over them (shallow, by key: the submit wins), its priority, max_attempts and backoff where
 *   the submit gives none, and the template's name and revision recorded in `job.submitted`.
 * An unknown template is `invalid_request` naming the field; an archived one refuses new jobs
 * (`invalid_transition`).
 */
import type { JsonObject, TemplateContext } from '../../machines/index.js';
import type { JobSpec } from '../commands/schemas.js';
import { InvalidRequestError, InvalidTransitionError } from '../errors.js';
import type { AggregateStore } from '../store/aggregate-store.js';

export interface MadeFrom {
  readonly name: string;
  readonly revision: number;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Fills the queue of each job that names a template and gives none; anything else is left for validation. */
export function fillTemplateQueues(body: unknown, aggregates: AggregateStore): unknown {
  const fill = (spec: unknown): unknown => {
    if (!isObject(spec) || typeof spec['template'] !== 'string' || spec['queue'] !== undefined) return spec;
    const queue = aggregates.get<TemplateContext>('template', spec['template'])?.state.context.spec?.queue;
    return queue === undefined ? spec : { ...spec, queue };
  };
  if (isObject(body) && Array.isArray(body['jobs'])) return { ...body, jobs: body['jobs'].map(fill) };
  return fill(body);
}

/** The job a spec naming a template makes (on the queue's leader), and the revision it was made from. */
export function applyTemplate(spec: JobSpec, aggregates: AggregateStore): { spec: JobSpec; madeFrom: MadeFrom | null } {
  if (spec.template === undefined) return { spec, madeFrom: null };
  const name = spec.template;
  const state = aggregates.get<TemplateContext>('template', name)?.state;
  const template = state?.context.spec;
  if (state === undefined || template === null || template === undefined) {
    throw new InvalidRequestError(`template: no template named ${name}`, { details: { issues: [{ path: 'template', message: `no template named ${name}` }] } });
  }
  if (state.value === 'archived') throw new InvalidTransitionError(`template ${name} is archived: it makes no new jobs`, { details: { template: name, status: 'archived' } });
  if (template.queue !== spec.queue) {
    throw new InvalidRequestError(`queue: template ${name} makes jobs for queue ${template.queue}, not ${spec.queue}`, { details: { issues: [{ path: 'queue', message: `template ${name} makes jobs for queue ${template.queue}` }] } });
  }
  const merged: JobSpec = {
    ...spec,
    params: { ...template.params, ...((spec.params ?? {}) as JsonObject) },
    ...(spec.priority === undefined && template.priority !== undefined ? { priority: template.priority } : {}),
    ...(spec.max_attempts === undefined && template.max_attempts !== undefined ? { max_attempts: template.max_attempts } : {}),
    ...(spec.backoff === undefined && template.backoff !== undefined ? { backoff: template.backoff } : {}),
  };
  return { spec: merged, madeFrom: { name, revision: template.revision } };
}
