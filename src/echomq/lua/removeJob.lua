--[[
  removeJob: delete one job, and with children every child recorded on it, in any queue
  (docs/protocol/scripts.md#script-removeJob).

  KEYS[1]  prefix "P:Q:": the job's keys and dedup keys are built from it
           (includes/job_keys.lua); a child or parent in another queue has its keys derived
           from its job reference
  KEYS[2]  repeat
  KEYS[3]  completed
  KEYS[4]  waiting-children
  KEYS[5]  delayed
  KEYS[6]  failed
  KEYS[7]  prioritized
  KEYS[8]  wait
  KEYS[9]  paused
  KEYS[10] active
  KEYS[11] meta
  KEYS[12] events
  KEYS[13] marker

  ARGV[1]  job id
  ARGV[2]  "1" to remove the children listed in :processed, :failed, :unsuccessful and
           :dependencies (recursively), else "0"

  Returns: 1 the job existed and was removed; 2 no such job hash (a stray id is still taken
  out of its state); 0 nothing removed because the job, or with children a pending child
  (recursively), holds a lock.
  Errors: -8 the job is its scheduler's current iteration.

  Effects: soft parent rule (the parent is released to its wait with a `waiting` event when
  this was its last pending child), dedup key released, job keys deleted, `removed` event
  (jobId, prev = state key suffix or "unknown") per removed job hash, in that job's queue.
]]
--@include "remove_job"

local q = {
  prefix = KEYS[1], ["repeat"] = KEYS[2], completed = KEYS[3], waiting_children = KEYS[4],
  delayed = KEYS[5], failed = KEYS[6], prioritized = KEYS[7], wait = KEYS[8], paused = KEYS[9],
  active = KEYS[10], meta = KEYS[11], events = KEYS[12], marker = KEYS[13],
}
local job_id = ARGV[1]
local with_children = ARGV[2] == "1"
local job_key = job_hash_key(q.prefix, job_id)

if is_current_iteration(q["repeat"], job_key, job_id) then
  return -8
end
if job_locked(job_key, with_children) then
  return 0
end
if remove_job_tree(q, q.prefix, job_id, with_children, true, {}) then
  return 1
end
return 2
