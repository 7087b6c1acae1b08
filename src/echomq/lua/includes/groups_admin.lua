-- Grouped jobs met outside the fetch: by getState, removal, drain, clean, obliterate, retries,
-- promotion and changes of priority or delay, and group settings (docs/protocol/groups.md).
-- Includes what it needs.
--@include "common"
--@include "job_keys"
--@include "groups"

-- The prefix key "P:Q:" of a queue, from one of its keys and that key's suffix: a job hash and
-- the job's id, or a state key and the state's name (a script given no prefix key finds the
-- group keys so, without more KEYS).
local function prefix_of(key, suffix)
  return string.sub(key, 1, #key - #suffix)
end

-- The group of the job whose hash is `job_key`, or nil for an ungrouped (or missing) job.
local function job_group(job_key)
  return redis.call("HGET", job_key, "gid") or nil
end

-- Take a grouped job out of the group structure that holds it: its group's waiting jobs
-- (group_unwait), g.delayed, or g.active (and g.stalled; its group's slot is released). Returns
-- the name an ungrouped job's structure would have ("wait", "delayed" or "active"), or nil when
-- none holds it.
local function group_take_out(g, gid, job_id)
  if group_unwait(g, gid, job_id) then
    return "wait"
  end
  if redis.call("ZREM", g.delayed, job_id) == 1 then
    return "delayed"
  end
  if redis.call("LREM", g.active, 0, job_id) > 0 then
    redis.call("SREM", g.stalled, job_id)
    group_release(g, gid, job_id, group_server_now())
    return "active"
  end
  return nil
end

-- A grouped waiting job's new priority: placed again among its group's waiting jobs, at the
-- back of its priority, or with lifo at the front (as a lifo job is placed). The group's counts
-- and g.waiting do not change. False when the job is not waiting in its group.
local function group_rescore(g, gid, job_id, priority, lifo)
  if not group_dequeue(g, gid, job_id) then
    return false
  end
  group_enqueue(g, job_id, gid, priority, lifo)
  return true
end

-- The groups left with no waiting job leave the rotation (their counter's rotation bit cleared),
-- and "" goes with them when no group is left in it. O(length of the rotation): called once by a
-- drain that is done, not per job.
local function group_tidy_rotation(g)
  local entries = redis.call("LRANGE", g.ready, 0, -1)
  local kept, groups = {}, 0
  for _, gid in ipairs(entries) do
    if gid == "" then
      kept[#kept + 1] = gid
    elseif group_has_waiting(g, gid) then
      kept[#kept + 1] = gid
      groups = groups + 1
    else
      if redis.call("INCRBY", group_run_key(g.prefix, gid), -1) == 0 then
        redis.call("DEL", group_run_key(g.prefix, gid))
      end
    end
  end
  if #kept == #entries then
    return
  end
  redis.call("DEL", g.ready)
  if groups > 0 then
    for i = 1, #kept, 5000 do
      redis.call("RPUSH", g.ready, unpack(kept, i, math.min(i + 4999, #kept)))
    end
  end
end

-- A group that has waiting jobs and is out of the rotation joins it when it may run now: not
-- paused, below its concurrency, and its rate window not full. A group in `g.limited` whose
-- window (the starts of the last window ms in `groups:limit:<gid>`, on the workers' clock:
-- `now` ms) now holds fewer starts than its raised or removed rate limit leaves `g.limited`
-- first. True when the group joined the rotation with this call.
local function group_recheck(g, gid, now)
  if not group_has_waiting(g, gid) then
    return false
  end
  if redis.call("ZSCORE", g.limited, gid) then
    local _, max_jobs, window = group_limits(g, gid)
    if max_jobs and window then
      local starts = redis.call("ZCOUNT", group_limit_key(g.prefix, gid),
        string.format("(%s", score_str(now - window)), "+inf")
      if starts >= max_jobs then
        return false
      end
    end
    redis.call("ZREM", g.limited, gid)
  end
  local state = group_state(g, gid) -- not in g.limited now: group_open, not group_may_run
  if group_in_rotation(state) or not group_open(g, gid, state) then
    return false
  end
  group_join(g, gid, state)
  return true
end
