-- Adding a job under a parent: the duplicate-id rules of a child
-- (docs/protocol/scripts.md#step-child-add). Needs "common", "job_keys" and "parent".

-- True when the existing job at `job_key` cannot be (re)attached to `parent_key`: it already
-- belongs to another parent whose hash still exists (code -7).
local function child_conflicts(job_key, parent_key)
  if parent_key == "" then
    return false
  end
  local current = redis.call("HGET", job_key, "parentKey")
  return current ~= false and current ~= parent_key and redis.call("EXISTS", current) == 1
end

-- Attach the existing job `job_id` of queue `q` (a duplicate custom id) to the parent: a
-- completed job counts as processed (its return value recorded), any other as pending; its
-- parent link is replaced. Returns true when it was recorded as processed.
local function attach_existing_child(q, job_id, job_key, parent_key, parent_json)
  local done = redis.call("ZSCORE", q.completed, job_id) ~= false
  if done then
    local value = redis.call("HGET", job_key, "returnvalue") or "null"
    redis.call("HSET", job_part_key(parent_key, "processed"), job_key, value)
  else
    redis.call("SADD", job_part_key(parent_key, "dependencies"), job_key)
  end
  redis.call("HSET", job_key, "parentKey", parent_key, "parent", parent_json)
  return done
end

-- Release the parent named by `parent_key` when it waits for children and none is pending
-- (all of them already existed and were completed).
local function release_if_no_pending(q, parent_key, parent_json, now)
  if redis.call("SCARD", job_part_key(parent_key, "dependencies")) > 0 then
    return
  end
  local p = parent_of(q, parent_key, parent_json)
  if parent_is_waiting(p.pq, p.id) and redis.call("EXISTS", parent_key) == 1 then
    release_parent(p.pq, p.id, now)
  end
end
