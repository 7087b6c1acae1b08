--[[
  cleanJobsInSet: hard-remove the jobs of one state older than a cutoff, one bounded batch per
  call (docs/protocol/scripts.md#script-cleanJobsInSet).

  KEYS[1]  prefix "P:Q:": job keys and dedup keys are built from it (includes/job_keys.lua);
           a parent in another queue has its keys derived from its job reference
  KEYS[2]  events
  KEYS[3]  repeat
  KEYS[4]  waiting-children (a parent in this queue released by a removed child leaves it)
  KEYS[5]  completed
  KEYS[6]  failed
  KEYS[7]  wait
  KEYS[8]  paused
  KEYS[9]  active
  KEYS[10] delayed
  KEYS[11] prioritized
  Of KEYS[5..11] only the state named by ARGV[3] is read.

  ARGV[1]  cutoff (ms): a job is old enough when its reference time is <= cutoff
  ARGV[2]  batch: the most entries inspected (and so removed) by this call (> 0)
  ARGV[3]  state: completed, failed, wait, paused, active, delayed or prioritized
  ARGV[4]  skip: entries to pass over first (those a previous call inspected and kept), counted
           from the tail for lists and from the lowest score for delayed/prioritized; ignored
           for completed/failed, where every inspected entry is removed

  Returns: {removed ids, number of entries inspected}. Fewer inspected than the batch means
  the scan reached the end.

  Reference time: completed/failed the score (finishedOn); delayed processedOn, else
  timestamp; prioritized timestamp; wait/paused/active finishedOn, else processedOn, else
  timestamp. A job without one (no hash) is removed. Current scheduler iterations are kept
  (not in completed/failed); active jobs are kept while their lock exists. List slots are
  overwritten with "" and then LREMed. Emits `cleaned` (count) on every call.

  Grouped jobs (docs/protocol/groups.md) follow the ungrouped ones of their state, as one
  sequence that `skip` and the batch run through: wait → groups:waiting (oldest first; a
  removed job leaves its group), delayed → groups:delayed, active → groups:active (from the
  tail; a removed job frees its group's slot). Same reference times and rules.
]]
--@include "remove_job"

local q = {
  prefix = KEYS[1], events = KEYS[2], ["repeat"] = KEYS[3], waiting_children = KEYS[4],
  completed = KEYS[5], failed = KEYS[6], wait = KEYS[7], paused = KEYS[8], active = KEYS[9],
  delayed = KEYS[10], prioritized = KEYS[11],
}
local cutoff = tonumber(ARGV[1])
local batch = tonumber(ARGV[2])
local state = ARGV[3]
local skip = tonumber(ARGV[4])
local state_keys = {
  completed = q.completed, failed = q.failed, wait = q.wait, paused = q.paused,
  active = q.active, delayed = q.delayed, prioritized = q.prioritized,
}
local state_key = state_keys[state]
if not state_key then
  return redis.error_reply("cleanJobsInSet: unknown state " .. tostring(state))
end
local removed = {}
local inspected = 0
local g = group_keys(q.prefix)
-- The grouped structure that follows the state's own, and how many entries the state's own held
-- when the call began (the grouped entries come after them).
local grouped_key = ({wait = g.waiting, delayed = g.delayed, active = g.active})[state]
local ungrouped_count = 0
-- current scheduler iterations, kept (not read for completed / failed)
local kept = {}
if state ~= "completed" and state ~= "failed" then
  kept = scheduler_iterations(q["repeat"])
end
if grouped_key then
  if state == "delayed" then
    ungrouped_count = redis.call("ZCARD", state_key)
  else
    ungrouped_count = redis.call("LLEN", state_key)
  end
end

local function old_enough(job_key, ...)
  local times = redis.call("HMGET", job_key, ...)
  for i = 1, select("#", ...) do
    local t = tonumber(times[i])
    if t then
      return t <= cutoff
    end
  end
  return true
end

-- Whether a job of a sorted set (delayed, prioritized, their grouped counterparts) is removed.
local function zset_victim(id)
  if kept[id] then
    return false
  end
  local job_key = job_hash_key(q.prefix, id)
  if state == "prioritized" then
    return old_enough(job_key, "timestamp")
  elseif state == "delayed" then
    return old_enough(job_key, "processedOn", "timestamp")
  end
  return old_enough(job_key, "finishedOn", "processedOn", "timestamp")
end

-- Inspect up to `count` entries of the list `key` from the tail, passing over `pass` entries
-- first, oldest first; each victim's slot is overwritten with "" then LREMed, and `release` (if
-- any) is called before its hard removal.
local function clean_list(key, pass, count, release)
  local len = redis.call("LLEN", key)
  local stop = len - pass - 1
  if stop < 0 then
    return
  end
  local start = math.max(0, stop - count + 1)
  local ids = redis.call("LRANGE", key, start, stop)
  inspected = inspected + #ids
  local n = 0
  -- Oldest first: the tail of the list is its oldest end.
  for j = #ids, 1, -1 do
    local id = ids[j]
    local job_key = job_hash_key(q.prefix, id)
    if not kept[id]
      and not (state == "active" and redis.call("EXISTS", job_part_key(job_key, "lock")) == 1)
      and old_enough(job_key, "finishedOn", "processedOn", "timestamp") then
      redis.call("LSET", key, start + j - 1 - len, "")
      if release then
        release(id, job_key)
      end
      hard_remove_job(q, id)
      removed[#removed + 1] = id
      n = n + 1
    end
  end
  if n > 0 then
    redis.call("LREM", key, -n, "")
  end
end

if state == "completed" or state == "failed" then
  removed = redis.call("ZRANGEBYSCORE", state_key, 0, score_str(cutoff), "LIMIT", 0, batch)
  inspected = #removed
  zrem_ids(state_key, removed)
  for _, id in ipairs(removed) do
    hard_remove_job(q, id)
  end
elseif state == "delayed" or state == "prioritized" then
  local ids = redis.call("ZRANGE", state_key, skip, skip + batch - 1)
  inspected = #ids
  for _, id in ipairs(ids) do
    if zset_victim(id) then
      removed[#removed + 1] = id
    end
  end
  zrem_ids(state_key, removed)
  for _, id in ipairs(removed) do
    hard_remove_job(q, id)
  end
else
  clean_list(state_key, skip, batch, nil)
end

-- The grouped entries, once the state's own are all inspected.
if grouped_key and inspected < batch then
  local pass = math.max(0, skip - ungrouped_count)
  local room = batch - inspected
  if state == "active" then
    clean_list(g.active, pass, room, function(id, job_key)
      redis.call("SREM", g.stalled, id)
      local gid = job_group(job_key)
      if gid then
        group_release(g, gid, id, group_server_now())
      end
    end)
  else
    local ids = redis.call("ZRANGE", grouped_key, pass, pass + room - 1)
    inspected = inspected + #ids
    for _, id in ipairs(ids) do
      if zset_victim(id) then
        local gid = state == "wait" and job_group(job_hash_key(q.prefix, id))
        if not (gid and group_unwait(g, gid, id)) then
          redis.call("ZREM", grouped_key, id)
        end
        hard_remove_job(q, id)
        removed[#removed + 1] = id
      end
    end
  end
end

redis.call("XADD", q.events, "*", "event", "cleaned", "count", int_str(#removed))
return {removed, inspected}
