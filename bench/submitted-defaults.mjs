// What a job.submitted that restates its defaults costs in JSON, against one that leaves them out
// (README "Where docket misses"): bytes per event, JSON.parse and JSON.stringify of a commit of 100.
//
//   node bench/submitted-defaults.mjs
const envelope = { id: 'ea7554189c8b3391ccf6bec0a8fb5f600', type: 'job.submitted', time: '2026-11-27T14:37:14.551Z', aggregate: { kind: 'job', id: 'a7554189c8b3391ccf6bec0a8fb5f600' }, queue: 'q', meta: { node: 'vm-a26a5bfd' } };
// As a node writes it today (a submit with params only).
const today = { job_id: 'a7554189c8b3391ccf6bec0a8fb5f600', key: null, params: { n: 1 }, priority: 5, position: null, run_at: '2026-11-27T14:37:14.551Z', max_attempts: 1, backoff: { base_ms: 1000, max_ms: 3600000, jitter: 0.2 }, attempt: 1, retry_of: null, waiting: false };
// The same job with the defaults left out (priority kept: it orders the queue).
const trimmed = { job_id: 'a7554189c8b3391ccf6bec0a8fb5f600', params: { n: 1 }, priority: 5 };
const ROUNDS = 2000;
for (const [name, data] of [['today', today], ['without defaults', trimmed]]) {
  const events = Array.from({ length: 100 }, (_, i) => ({ ...envelope, id: `${envelope.id.slice(0, -3)}${String(i).padStart(3, '0')}`, data }));
  const commit = { v: 2, commit: 'q.q.n.1.1', partition: 'q.q', writer: { node: 'n', epoch: 1 }, prev_hash: null, events };
  const text = JSON.stringify(commit);
  let t = performance.now();
  for (let i = 0; i < ROUNDS; i++) JSON.parse(text);
  const parse = ((performance.now() - t) * 1000) / ROUNDS / 100;
  t = performance.now();
  for (let i = 0; i < ROUNDS; i++) JSON.stringify(commit);
  const stringify = ((performance.now() - t) * 1000) / ROUNDS / 100;
  console.log(JSON.stringify({ event: name, bytes: Math.round(text.length / 100), parse_us: +parse.toFixed(2), stringify_us: +stringify.toFixed(2) }));
}
