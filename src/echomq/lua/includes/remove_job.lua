-- Deleting jobs: the per-job keys, the dedup key, the parent rule, and scheduler iterations
-- (docs/protocol/scripts.md#step-hard-remove, #script-removeJob). Callers take the id out of
-- its state set or list themselves, except remove_job_tree, which finds the state.
--@include "common"
--@include "job_keys"
--@include "parents"

-- DEL `de:<deid>` and `dn:<deid>` when the job still owns its deduplication key.
local function release_dedup_key(base, job_key, job_id)
  local deid = redis.call("HGET", job_key, "deid")
  if deid then
    local dedup_key = base .. "de:" .. deid
    if redis.call("GET", dedup_key) == job_id then
      redis.call("DEL", dedup_key, base .. "dn:" .. deid)
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

-- Unlink a job that is being deleted from its parent's :dependencies. When that was the
-- parent's last pending child and the parent is in `waiting-children`:
--   soft (hard == false): RPUSH the parent to its queue's wait + `waiting` event (prev
--     waiting-children);
--   hard: a parent in the same base key is deleted too (recursively, no event); a parent in
--     another queue is RPUSHed to its wait without an event.
local function detach_from_parent(base, job_key, hard)
  local parent_key = redis.call("HGET", job_key, "parentKey")
  if not parent_key then
    return
  end
  local deps_key = parent_key .. ":dependencies"
  if redis.call("SREM", deps_key, job_key) == 0 or redis.call("SCARD", deps_key) > 0 then
    return
  end
  local parent_id, parent_base = split_job_key(parent_key)
  if redis.call("ZREM", parent_base .. "waiting-children", parent_id) == 0 then
    return
  end
  if hard and parent_base == base then
    detach_from_parent(base, parent_key, true)
    release_dedup_key(base, parent_key, parent_id)
    delete_job_keys(parent_key)
    return
  end
  -- ({}: this include's callers do not declare their own queue's keys yet, so every queue's
  -- keys are derived)
  push_parent_to_wait(queue_keys_for({}, parent_base), parent_id)
  if not hard then
    redis.call("XADD", parent_base .. "events", "*", "event", "waiting", "jobId", parent_id,
      "prev", "waiting-children")
  end
end

-- Hard removal (clean, drain, obliterate) of a job already taken out of its state.
local function hard_remove_job(base, job_id)
  local job_key = base .. job_id
  detach_from_parent(base, job_key, true)
  release_dedup_key(base, job_key, job_id)
  delete_job_keys(job_key)
end

-- ZREM ids in chunks (Lua's unpack has a stack limit).
local function zrem_ids(key, ids)
  for i = 1, #ids, 5000 do
    redis.call("ZREM", key, unpack(ids, i, math.min(i + 4999, #ids)))
  end
end

-- The full keys of every child recorded on a job: :processed, :failed, :unsuccessful, :dependencies.
local function children_of(job_key)
  local out = redis.call("HKEYS", job_key .. ":processed")
  for _, k in ipairs(redis.call("HKEYS", job_key .. ":failed")) do
    out[#out + 1] = k
  end
  for _, k in ipairs(redis.call("ZRANGE", job_key .. ":unsuccessful", 0, -1)) do
    out[#out + 1] = k
  end
  for _, k in ipairs(redis.call("SMEMBERS", job_key .. ":dependencies")) do
    out[#out + 1] = k
  end
  return out
end

-- True when the job's lock exists or, with children, a pending child (recursively) is locked.
local function job_locked(job_key, with_children)
  if redis.call("EXISTS", job_key .. ":lock") == 1 then
    return true
  end
  if with_children then
    for _, child_key in ipairs(redis.call("SMEMBERS", job_key .. ":dependencies")) do
      if job_locked(child_key, true) then
        return true
      end
    end
  end
  return false
end

local zset_states = {"completed", "waiting-children", "delayed", "failed", "prioritized"}
local list_states = {"wait", "paused", "active"}

-- Take the id out of the first state that holds it; return that key's suffix or "unknown".
local function remove_from_any_state(base, job_id)
  for _, state in ipairs(zset_states) do
    if redis.call("ZREM", base .. state, job_id) == 1 then
      return state
    end
  end
  for _, state in ipairs(list_states) do
    if redis.call("LREM", base .. state, 0, job_id) > 0 then
      return state
    end
  end
  return "unknown"
end

-- Soft removal (removeJob): unlink from the parent when `detach`, remove recorded children first
-- when `with_children` (each in its own queue), take the job out of its state, release its dedup
-- key, delete its keys, and emit `removed` (prev = the state key's suffix) to its queue's stream
-- when its hash existed. `visited` (full key -> true) guards against listing a child twice.
-- Returns whether the job hash existed.
local function remove_job_tree(base, job_id, with_children, detach, visited)
  local job_key = base .. job_id
  if visited[job_key] then
    return false
  end
  visited[job_key] = true
  if detach then
    detach_from_parent(base, job_key, false)
  end
  if with_children then
    for _, child_key in ipairs(children_of(job_key)) do
      local child_id, child_base = split_job_key(child_key)
      remove_job_tree(child_base, child_id, true, false, visited)
    end
  end
  local prev = remove_from_any_state(base, job_id)
  release_dedup_key(base, job_key, job_id)
  local existed = redis.call("EXISTS", job_key) == 1
  delete_job_keys(job_key)
  if existed then
    redis.call("XADD", base .. "events", "MAXLEN", "~", max_events(base .. "meta"), "*",
      "event", "removed", "jobId", job_id, "prev", prev)
  end
  return existed
end
