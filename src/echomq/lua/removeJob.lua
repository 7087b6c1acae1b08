--[[
  removeJob: delete one job, and with children every child recorded on it, in any queue
  (docs/protocol/scripts.md#script-removeJob).

  KEYS[1] the job hash "P:Q:<id>"
  KEYS[2] repeat

  ARGV[1] base key "P:Q:"
  ARGV[2] job id
  ARGV[3] "1" to remove the children listed in :processed, :failed, :unsuccessful and
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

local base = ARGV[1]
local job_id = ARGV[2]
local with_children = ARGV[3] == "1"

if is_current_iteration(KEYS[2], KEYS[1], job_id) then
  return -8
end
if job_locked(KEYS[1], with_children) then
  return 0
end
if remove_job_tree(base, job_id, with_children, true, {}) then
  return 1
end
return 2
