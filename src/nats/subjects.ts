/**
 * Every stream, subject and bucket name docket uses, and the only place they are spelled.
 * Queue names and ids are checked here so nothing else can build a subject with a wildcard in it.
 */
export const STREAM = 'DOCKET';
export const EVENT_SUBJECTS = 'docket.evt.>';
/** Commands are served by a queue group so that each request is answered by one node. */
export const COMMAND_QUEUE_GROUP = 'docket';
export const COMMAND_PREFIX = 'docket.cmd';

export const QUEUE_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;

export function isQueueName(queue: unknown): queue is string {
  return typeof queue === 'string' && QUEUE_NAME.test(queue);
}

export function isIdToken(id: unknown): id is string {
  return typeof id === 'string' && TOKEN.test(id);
}

function assertQueue(queue: string): void {
  if (!QUEUE_NAME.test(queue)) throw new Error(`invalid queue name ${JSON.stringify(queue)}`);
}
function assertToken(id: string): void {
  if (!TOKEN.test(id)) throw new Error(`invalid id ${JSON.stringify(id)}`);
}

export const subjects = {
  job(queue: string, jobId: string): string {
    assertQueue(queue);
    assertToken(jobId);
    return `docket.evt.job.${queue}.${jobId}`;
  },
  /** All job events, or one queue's. */
  jobs(queue?: string): string {
    if (queue === undefined) return 'docket.evt.job.>';
    assertQueue(queue);
    return `docket.evt.job.${queue}.>`;
  },
  command(verb: string): string {
    return `${COMMAND_PREFIX}.${verb}`;
  },
  work(queue: string, verb: 'claim' | 'heartbeat' | 'complete' | 'fail'): string {
    assertQueue(queue);
    return `docket.work.${queue}.${verb}`;
  },
};

export interface ParsedSubject {
  readonly kind: 'job';
  readonly queue: string;
  readonly id: string;
}

/** The aggregate an event subject belongs to; null for subjects docket does not know. */
export function parseEventSubject(subject: string): ParsedSubject | null {
  const parts = subject.split('.');
  if (parts.length === 5 && parts[0] === 'docket' && parts[1] === 'evt' && parts[2] === 'job') {
    return { kind: 'job', queue: parts[3]!, id: parts[4]! };
  }
  return null;
}
