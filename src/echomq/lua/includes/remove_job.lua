-- Deleting jobs: the per-job keys, the dedup key, the parent rule, and scheduler iterations
-- (docs/protocol/scripts.md#step-hard-remove, #script-removeJob). Callers take the id out of
-- its state set or list themselves, except remove_job_tree, which finds the state.
-- `q` holds the keys of the script's own queue (prefix, waiting_children; for remove_job_tree
-- also repeat, completed, delayed, failed, prioritized, wait, paused, active, meta, events,
-- marker); another queue's keys (a parent or a child in a flow) come from queue_keys_for.
--@include "common"
--@include "job_keys"
--@include "parents"
--@include "groups_admin"

-- DEL `de:<deid>` and `dn:<deid>` when the job still owns its deduplication key; `prefix` is
-- the prefix key of the job's queue.
local function release_dedup_key(prefix, job_key, job_id)
  local deid = redis.call("HGET", job_key, "deid")
  if deid then
    local de_key = dedup_key(prefix, deid)
    if redis.call("GET", de_key) == job_id then
      redis.call("DEL", de_key, dedup_next_key(prefix, deid))
    end
  end
end

-- Set (table id -> true) of the current iteration ids of every member of `repeat`, and its size.
local function scheduler_iterations(repeat_key)
  local kept = {}
  local entries = redis.call("ZRANGE", repeat_key, 0, -1, "WITHSCORES")
  for i = 1, #entries, 2 do
    kept[iteration_id(entries[i], entries[i + 1])] = true
  end
  return kept, #entries / 2
end

-- True when the job is the current iteration of the scheduler named by its `rjk` field.
local function is_current_iteration(repeat_key, job_key, job_id)
  local rjk = redis.call("HGET", job_key, "rjk")
  if not rjk then
    return false
  end
  local score = redis.call("ZSCORE", repeat_key, rjk)
  return score ~= false and score ~= nil and iteration_id(rjk, score) == job_id
end

local detach_from_parent

-- Take the job `job_key` out of the :dependencies of its parent `parent_key`; `q` is the keys
-- table of the job's queue. When that was the parent's last pending child and the parent is in
-- `waiting-children`:
--   soft (hard == false): RPUSH the parent to its queue's wait + `waiting` event (prev
--     waiting-children);
--   hard: a parent in the same queue is deleted too (recursively, no event); a parent in
--     another queue is RPUSHed to its wait without an event.
local function unlink_from_parent(q, parent_key, job_key, hard)
  local deps_key = job_part_key(parent_key, "dependencies")
  if redis.call("SREM", deps_key, job_key) == 0 or redis.call("SCARD", deps_key) > 0 then
    return
  end
  local parent_id, parent_prefix = split_job_key(parent_key)
  local pq = queue_keys_for(q, parent_prefix)
  if redis.call("ZREM", pq.waiting_children, parent_id) == 0 then
    return
  end
  if hard and pq == q then
    detach_from_parent(q, parent_key, true)
    release_dedup_key(q.prefix, parent_key, parent_id)
    delete_job_keys(parent_key)
    return
  end
  push_parent_to_wait(pq, parent_id)
  if not hard then
    redis.call("XADD", pq.events, "*", "event", "waiting", "jobId", parent_id,
      "prev", "waiting-children")
  end
end

-- Unlink a job of the script's own queue `q` that is being deleted from the parent named by
-- its `parentKey` field (unlink_from_parent).
detach_from_parent = function(q, job_key, hard)
  local parent_key = redis.call("HGET", job_key, "parentKey")
  if parent_key then
    unlink_from_parent(q, parent_key, job_key, hard)
  end
end

-- Hard removal (clean, drain, obliterate) of a job of `q` already taken out of its state.
local function hard_remove_job(q, job_id)
  local job_key = job_hash_key(q.prefix, job_id)
  detach_from_parent(q, job_key, true)
  release_dedup_key(q.prefix, job_key, job_id)
  delete_job_keys(job_key)
end

-- Hard-remove up to `budget` of group `gid`'s waiting jobs in the order it runs them (its
-- LIST, then its ZSET), passing over the ids in `kept` (schedulers' current iterations); `g` is
-- group_keys(q.prefix). Each is taken out from near the LIST's head (past the kept ones), so a
-- job costs O(kept) however long the group's LIST is. Returns how many were removed.
local function group_remove_waiting(q, g, gid, kept, budget)
  local wait_key = group_wait_key(q.prefix, gid)
  local prio_key = group_prio_key(q.prefix, gid)
  local skip = 0 -- kept ids at the head
  local removed = 0
  while removed < budget do
    local listed = redis.call("LLEN", wait_key)
    local want = budget - removed
    local ids
    if skip < listed then
      ids = redis.call("LRANGE", wait_key, skip, skip + want - 1)
    else
      ids = redis.call("ZRANGE", prio_key, skip - listed, skip - listed + want - 1)
    end
    if #ids == 0 then
      break
    end
    for _, id in ipairs(ids) do
      if kept[id] then
        skip = skip + 1
      else
        group_unwait(g, gid, id)
        hard_remove_job(q, id)
        removed = removed + 1
      end
    end
  end
  return removed
end

-- ZREM ids in chunks (Lua's unpack has a stack limit).
local function zrem_ids(key, ids)
  for i = 1, #ids, 5000 do
    redis.call("ZREM", key, unpack(ids, i, math.min(i + 4999, #ids)))
  end
end

-- The full keys of every child recorded on a job: :processed, :failed, :unsuccessful, :dependencies.
local function children_of(job_key)
  local out = redis.call("HKEYS", job_part_key(job_key, "processed"))
  for _, k in ipairs(redis.call("HKEYS", job_part_key(job_key, "failed"))) do
    out[#out + 1] = k
  end
  for _, k in ipairs(redis.call("ZRANGE", job_part_key(job_key, "unsuccessful"), 0, -1)) do
    out[#out + 1] = k
  end
  for _, k in ipairs(redis.call("SMEMBERS", job_part_key(job_key, "dependencies"))) do
    out[#out + 1] = k
  end
  return out
end

-- True when the job's lock exists or, with children, a pending child (recursively) is locked.
local function job_locked(job_key, with_children)
  if redis.call("EXISTS", job_part_key(job_key, "lock")) == 1 then
    return true
  end
  if with_children then
    for _, child_key in ipairs(redis.call("SMEMBERS", job_part_key(job_key, "dependencies"))) do
      if job_locked(child_key, true) then
        return true
      end
    end
  end
  return false
end

-- The structures a job may sit in, in the order they are searched: {field of a queue's keys
-- table, the key's suffix}.
local zset_states = {
  {"completed", "completed"}, {"waiting_children", "waiting-children"}, {"delayed", "delayed"},
  {"failed", "failed"}, {"prioritized", "prioritized"},
}
local list_states = {{"wait", "wait"}, {"paused", "paused"}, {"active", "active"}}

-- Take the id out of the first structure of queue `jq` that holds it; return that key's suffix
-- or "unknown". A grouped job (its hash has `gid`), looked for only when none of those holds
-- it, leaves its group's waiting jobs, groups:delayed or groups:active (its group's slot
-- released) and is reported as "wait", "delayed" or "active" (docs/protocol/groups.md).
local function remove_from_any_state(jq, job_id)
  for _, state in ipairs(zset_states) do
    if redis.call("ZREM", jq[state[1]], job_id) == 1 then
      return state[2]
    end
  end
  for _, state in ipairs(list_states) do
    if redis.call("LREM", jq[state[1]], 0, job_id) > 0 then
      return state[2]
    end
  end
  local gid = job_group(job_hash_key(jq.prefix, job_id))
  if gid then
    return group_take_out(group_keys(jq.prefix), gid, job_id) or "unknown"
  end
  return "unknown"
end

-- Soft removal (removeJob) of the job `job_id` of the queue whose prefix key is `prefix` (the
-- script's own queue `q`, or a child's queue): unlink from the parent when `detach` (only for a
-- job of `q`), remove recorded children first when `with_children` (each in its own queue), take
-- the job out of its state, release its dedup key, delete its keys, and emit `removed` (prev =
-- the state key's suffix) to its queue's stream when its hash existed. `visited` (full key ->
-- true) guards against listing a child twice. Returns whether the job hash existed.
local function remove_job_tree(q, prefix, job_id, with_children, detach, visited)
  local job_key = job_hash_key(prefix, job_id)
  if visited[job_key] then
    return false
  end
  visited[job_key] = true
  local jq = queue_keys_for(q, prefix)
  if detach then
    detach_from_parent(jq, job_key, false)
  end
  if with_children then
    for _, child_key in ipairs(children_of(job_key)) do
      local child_id, child_prefix = split_job_key(child_key)
      remove_job_tree(q, child_prefix, child_id, true, false, visited)
    end
  end
  local prev = remove_from_any_state(jq, job_id)
  release_dedup_key(prefix, job_key, job_id)
  local existed = redis.call("EXISTS", job_key) == 1
  delete_job_keys(job_key)
  if existed then
    redis.call("XADD", jq.events, "MAXLEN", "~", max_events(jq.meta), "*",
      "event", "removed", "jobId", job_id, "prev", prev)
  end
  return existed
end
