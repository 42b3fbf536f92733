/**
 * The kernel's fold: every event of a commit goes to the store of its kind (jobs to the JobStore,
 * every other kind to the AggregateStore). The tail and the partition writers fold through it,
 * so a kind known here is known to every node, live or replaying.
 */
import { isAggregateEvent, type Envelope, type Position } from '../../machines/index.js';
import { isJobEvent } from '../nats/codec.js';
import { AggregateStore } from './aggregate-store.js';
import { JobStore, type ApplyResult } from './job-store.js';

/** What folding one event did; `not_folded`: no store here knows its kind or type. */
export type FoldResult = ApplyResult | 'not_folded';

export interface EventFolder {
  applyEvent(position: Position, event: Envelope): FoldResult;
}

export class Kernel implements EventFolder {
  /** Events handed to the fold since this kernel was made (what the node's checkpoint cadence counts). */
  folded = 0;

  constructor(
    readonly jobs: JobStore = new JobStore(),
    readonly aggregates: AggregateStore = new AggregateStore(),
  ) {}

  applyEvent(position: Position, event: Envelope): FoldResult {
    this.folded += 1;
    if (isJobEvent(event)) return event.queue === undefined ? 'not_folded' : this.jobs.apply({ seq: position, queue: event.queue, jobId: event.aggregate.id, event });
    if (isAggregateEvent(event)) return this.aggregates.apply(position, event);
    return 'not_folded';
  }

  /** Events the machines refused while folding the log (a tampered log; `docket audit` names them). */
  get refused(): number {
    return this.jobs.refused + this.aggregates.refused;
  }
}
