/**
 * Every stream, subject and bucket name docket uses, and the only place they are spelled.
 * Queue names and ids are checked here so nothing else can build a subject with a wildcard in it.
 */
export const STREAM = 'DOCKET';
/** The stream's one subject filter: every partition's commits (log v2). */
export const LOG_SUBJECTS = 'docket.log.>';
/** The partition of aggregates that span queues (templates, schedules, groups). */
export const SYS_PARTITION = 'sys';

/** The header of a live commit (`docket.live.<partition>`) that holds its stream sequence: the first part of its events' positions. */
export const LIVE_SEQ_HEADER = 'Docket-Seq';

const LIVE_PREFIX = 'docket.live.';

/**
 * `commit`: one core message per commit, on `docket.live.<partition>`. `each`: that, and each
 * event on `docket.evt.<kind>.<queue>.<id>` too, for subscribers that pick events by subject.
 */
export const LIVE_EVENT_MODES = ['commit', 'each'] as const;
export type LiveEventMode = (typeof LIVE_EVENT_MODES)[number];

/**
 * The name the `sys` partition's leadership lease and forwarded writes go by: a queue name can
 * hold no '.', so no queue (not even one called `sys`) can take it.
 */
export const SYS_LEASE = 'sys.partition';

/** The partition a leadership lease names: `sys` for SYS_LEASE, else the queue's `q.<queue>`. */
export function partitionOfLease(name: string): string {
  return name === SYS_LEASE ? SYS_PARTITION : queuePartition(name);
}

/** Commands are served by a queue group so that each request is answered by one node. */
export const COMMAND_QUEUE_GROUP = 'docket';
export const COMMAND_PREFIX = 'docket.cmd';

/** nats-server's status on a reply when nothing subscribes to the request's subject (no_responders), a JetStream publish's included. */
export const NO_RESPONDERS = 503;

/** The headers every append carries (DESIGN: dedupe by commit id, guarded by the partition's last sequence). */
export const MSG_ID_HEADER = 'Nats-Msg-Id';
export const EXPECTED_HEADER = 'Nats-Expected-Last-Subject-Sequence';
export const EXPECTED_STREAM_HEADER = 'Nats-Expected-Stream';

export const QUEUE_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** A job id, run id or node name: one subject token. */
export const ID_TOKEN = /^[A-Za-z0-9_-]{1,128}$/;
/** A worker node's name (fan-out jobs): data only, never a subject token, so any host name fits. */
export const NODE_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

export function isQueueName(queue: unknown): queue is string {
  return typeof queue === 'string' && QUEUE_NAME.test(queue);
}

export function isIdToken(id: unknown): id is string {
  return typeof id === 'string' && ID_TOKEN.test(id);
}

function assertQueue(queue: string): void {
  if (!QUEUE_NAME.test(queue)) throw new Error(`invalid queue name ${JSON.stringify(queue)}`);
}
function assertToken(id: string): void {
  if (!ID_TOKEN.test(id)) throw new Error(`invalid id ${JSON.stringify(id)}`);
}

export const subjects = {
  /** A partition's commits: `docket.log.q.<queue>` or `docket.log.sys`. */
  partition(partition: string): string {
    if (partition !== SYS_PARTITION) assertQueue(queueOfPartition(partition));
    return `docket.log.${partition}`;
  },
  /**
   * Where a partition's commits are published live (core NATS, not stored) once acknowledged:
   * `docket.live.q.<queue>` or `docket.live.sys`, the payload as stored, its sequence in the
   * `Docket-Seq` header.
   */
  live(partition: string): string {
    if (partition !== SYS_PARTITION) assertQueue(queueOfPartition(partition));
    return `${LIVE_PREFIX}${partition}`;
  },
  /** Every queue's live commits, or one queue's. */
  liveQueues(queue?: string): string {
    if (queue === undefined) return `${LIVE_PREFIX}${queuePartition('*')}`;
    assertQueue(queue);
    return `${LIVE_PREFIX}${queuePartition(queue)}`;
  },
  /** The partition a live commit's subject names (`docket.live.q.<queue>` -> `q.<queue>`). */
  partitionOfLive(subject: string): string {
    return subject.slice(LIVE_PREFIX.length);
  },
  /** The live event subject of a job (core NATS, with `liveEvents: 'each'`). */
  job(queue: string, jobId: string): string {
    assertQueue(queue);
    assertToken(jobId);
    return `docket.evt.job.${queue}.${jobId}`;
  },
  /** The live event subject of any aggregate (with `liveEvents: 'each'`): `docket.evt.<kind>.<queue>.<id>`, or `docket.evt.<kind>.<id>` for a `sys` one. */
  event(kind: string, queue: string | undefined, id: string): string {
    assertToken(id);
    if (queue === undefined) return `docket.evt.${kind}.${id}`;
    assertQueue(queue);
    return `docket.evt.${kind}.${queue}.${id}`;
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
  work(queue: string, verb: WorkVerb): string {
    assertQueue(queue);
    return `docket.work.${queue}.${verb}`;
  },
  /** Every worker request, served by one node of the `docket` group, which forwards to the leader. */
  allWork: 'docket.work.>',
  /** A node's private inbox for work requests forwarded to it as a queue's leader. */
  leaderWork(node: string, queue: string, verb: WorkVerb): string {
    assertToken(node);
    assertQueue(queue);
    return `docket.leader.${node}.${queue}.${verb}`;
  },
  leaderInbox(node: string): string {
    assertToken(node);
    return `docket.leader.${node}.>`;
  },
  /** A command forwarded to a partition's leader (the node's private subject for its partitions): a queue, or SYS_LEASE. */
  forwarded(node: string, lease: string): string {
    assertToken(node);
    if (lease !== SYS_LEASE) assertQueue(lease);
    return `docket.forward.${node}.${lease}`;
  },
  forwardedInbox(node: string): string {
    assertToken(node);
    return `docket.forward.${node}.>`;
  },
  /** The lease a forwarded subject names (what follows `docket.forward.<node>.`). */
  forwardedLease(node: string, subject: string): string {
    return subject.slice(`docket.forward.${node}.`.length);
  },
};

/** The partition of a queue's aggregates. */
export function queuePartition(queue: string): string {
  return `q.${queue}`;
}

/** The queue of a `q.<queue>` partition ('' for anything else). */
export function queueOfPartition(partition: string): string {
  return partition.startsWith('q.') ? partition.slice(2) : '';
}

/** The partition a `docket.log.<partition>` subject names; null for other subjects. */
export function parseLogSubject(subject: string): string | null {
  if (!subject.startsWith('docket.log.')) return null;
  const partition = subject.slice('docket.log.'.length);
  if (partition === SYS_PARTITION) return partition;
  return QUEUE_NAME.test(queueOfPartition(partition)) ? partition : null;
}

export const WORK_VERBS = ['claim', 'heartbeat', 'complete', 'fail'] as const;
export type WorkVerb = (typeof WORK_VERBS)[number];
/** The KV bucket holding per-queue leadership leases. */
export const LEADERS_BUCKET = 'docket_leaders';

/** Queue and verb of a `docket.work.<queue>.<verb>` or `docket.leader.<node>.<queue>.<verb>` subject. */
export function parseWorkSubject(subject: string): { queue: string; verb: WorkVerb } | null {
  const parts = subject.split('.');
  const [queue, verb] = parts[1] === 'work' && parts.length === 4 ? [parts[2], parts[3]] : parts[1] === 'leader' && parts.length === 5 ? [parts[3], parts[4]] : [];
  if (queue === undefined || verb === undefined || !QUEUE_NAME.test(queue)) return null;
  return (WORK_VERBS as readonly string[]).includes(verb) ? { queue, verb: verb as WorkVerb } : null;
}

/** A node name made safe as one subject token. */
export function toNodeToken(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 128) || 'node';
}

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
