-- Flow bookkeeping on a parent when a child leaves (completes, fails, is removed).
-- Needs "common" and "job_keys". `q` holds the keys of the script's own queue; a parent may
-- live in another queue, whose keys queue_keys_for derives from the parent's prefix.
--@include "requeue"
--@include "groups"

-- Move a parent out of waiting-children into delayed / wait / prioritized of its queue `pq`.
local function release_parent(pq, parent_id, now)
  local parent_key = job_hash_key(pq.prefix, parent_id)
  redis.call("ZREM", pq.waiting_children, parent_id)
  local fields = redis.call("HMGET", parent_key, "priority", "delay", "gid")
  local priority = tonumber(fields[1]) or 0
  local delay = tonumber(fields[2]) or 0
  local gid = fields[3] or nil
  if delay > 0 then
    local due = now + delay
    if gid then
      group_delay(group_keys(pq.prefix), pq.marker, parent_id, due)
    else
      redis.call("ZADD", pq.delayed, score_str(due * 4096), parent_id)
    end
    redis.call("XADD", pq.events, "*", "event", "delayed", "jobId", parent_id,
      "delay", int_str(due))
    if not gid then
      refresh_delay_marker(pq.marker, pq.delayed)
    end
    return
  end
  if gid then
    group_place(group_keys(pq.prefix), parent_id, gid, priority, true, now)
    if not paused_or_maxed(pq.meta, pq.active) then
      add_base_marker(pq.marker)
    end
  else
    requeue_ready(pq.wait, pq.prioritized, pq.pc, pq.marker,
      paused_or_maxed(pq.meta, pq.active), priority, parent_id, "RPUSH")
  end
  redis.call("XADD", pq.events, "*", "event", "waiting", "jobId", parent_id,
    "prev", "waiting-children")
end

local function parent_is_waiting(pq, parent_id)
  return redis.call("ZSCORE", pq.waiting_children, parent_id) ~= false
end

-- Parse the child's `parent` JSON (falls back to its parentKey for the id and queue); `pq` is
-- set to the keys of the parent's queue.
local function parent_of(q, parent_key, parent_json)
  local p = {}
  if parent_json and parent_json ~= "" then
    local ok, decoded = pcall(cjson.decode, parent_json)
    if ok and type(decoded) == "table" then
      p = decoded
    end
  end
  if not p.id or not p.queueKey then
    local queue_key, id = string.match(parent_key, "^(.*):([^:]+)$")
    p.id = p.id or id
    p.queueKey = p.queueKey or queue_key
  end
  p.pq = queue_keys_for(q, queue_prefix(p.queueKey))
  return p
end

-- A child completed: record its return value and release the parent when it was the last.
local function child_completed(q, job_key, parent_key, parent_json, return_value, now)
  local p = parent_of(q, parent_key, parent_json)
  local deps = job_part_key(parent_key, "dependencies")
  if redis.call("SREM", deps, job_key) == 1 then
    redis.call("HSET", job_part_key(parent_key, "processed"), job_key, return_value)
    if redis.call("SCARD", deps) == 0 and parent_is_waiting(p.pq, p.id) then
      release_parent(p.pq, p.id, now)
    end
  end
end

-- A child failed for good: apply the failure flag stored in its `parent` field.
local function child_failed(q, job_key, parent_key, parent_json, reason, now)
  local p = parent_of(q, parent_key, parent_json)
  local pq = p.pq
  local deps = job_part_key(parent_key, "dependencies")
  if not (p.fpof or p.cpof or p.idof or p.rdof) then
    return
  end
  if redis.call("SREM", deps, job_key) == 0 then
    return
  end
  local waiting = parent_is_waiting(pq, p.id)
  if p.fpof then
    redis.call("ZADD", job_part_key(parent_key, "unsuccessful"), now, job_key)
    local defa = "child " .. job_key .. " failed"
    if waiting then
      redis.call("HSET", parent_key, "defa", defa)
      release_parent(pq, p.id, now)
    elseif redis.call("ZREM", pq.delayed, p.id) == 1 then
      redis.call("HSET", parent_key, "defa", defa, "delay", 0)
      redis.call("ZADD", pq.waiting_children, now, p.id)
      release_parent(pq, p.id, now)
    elseif redis.call("ZSCORE", pq.failed, p.id) == false then
      redis.call("HSET", parent_key, "defa", defa)
    end
  elseif p.cpof then
    redis.call("HSET", job_part_key(parent_key, "failed"), job_key, reason)
    if waiting then
      release_parent(pq, p.id, now)
    end
  elseif p.idof then
    redis.call("HSET", job_part_key(parent_key, "failed"), job_key, reason)
    if waiting and redis.call("SCARD", deps) == 0 then
      release_parent(pq, p.id, now)
    end
  elseif p.rdof then
    if waiting and redis.call("SCARD", deps) == 0 then
      release_parent(pq, p.id, now)
    end
  end
end
