--[[
  removeUnprocessedChildren: delete a job's pending children, and theirs, recursively
  (docs/protocol/scripts.md#script-removeUnprocessedChildren). Children that finished (in
  :processed, :failed, :unsuccessful) are not touched, nor are pending ones holding a lock or in
  their queue's `failed`.

  KEYS[1]  prefix "P:Q:": the job key is built from it (includes/job_keys.lua); a child or
           parent in another queue has its keys derived from its job reference
  KEYS[2]  completed
  KEYS[3]  waiting-children
  KEYS[4]  delayed
  KEYS[5]  failed
  KEYS[6]  prioritized
  KEYS[7]  wait
  KEYS[8]  paused
  KEYS[9]  active
  KEYS[10] meta
  KEYS[11] events
  KEYS[12] marker

  ARGV[1]  job id

  Returns: how many child job hashes were deleted.
  Errors: none (a missing job has no children).

  Effects per removed child: soft parent rule (the parent leaves `waiting-children` for its `wait`
  with a `waiting` event when this was its last pending child), its own pending children removed
  first, taken out of its state, dedup key released, job keys deleted, `removed` event (jobId,
  prev = state key suffix or "unknown") in its queue.
]]
--@include "remove_job"

local q = {
  prefix = KEYS[1], completed = KEYS[2], waiting_children = KEYS[3], delayed = KEYS[4],
  failed = KEYS[5], prioritized = KEYS[6], wait = KEYS[7], paused = KEYS[8], active = KEYS[9],
  meta = KEYS[10], events = KEYS[11], marker = KEYS[12],
}
-- Full keys already handled (guards against a child listed twice or a cycle), and the job
-- hashes remove_job_tree has deleted.
local seen, visited = {}, {}

local function remove_unprocessed(parent_key)
  local removed = 0
  for _, child_key in ipairs(redis.call("SMEMBERS", job_part_key(parent_key, "dependencies"))) do
    local child_id, child_prefix = split_job_key(child_key)
    local cq = queue_keys_for(q, child_prefix)
    if not seen[child_key] and redis.call("EXISTS", job_part_key(child_key, "lock")) == 0
        and redis.call("ZSCORE", cq.failed, child_id) == false then
      seen[child_key] = true
      unlink_from_parent(q, parent_key, child_key, false)
      removed = removed + remove_unprocessed(child_key)
      if remove_job_tree(q, child_prefix, child_id, false, false, visited) then
        removed = removed + 1
      end
    end
  end
  return removed
end

local job_key = job_hash_key(q.prefix, ARGV[1])
seen[job_key] = true
return remove_unprocessed(job_key)
