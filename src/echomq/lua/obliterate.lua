--[[
  obliterate: delete a whole queue, spending at most a budget of jobs per call
  (docs/protocol/scripts.md#script-obliterate). With ARGV[4] = "1" an unpaused queue is paused
  first, in the same atomic step, so a refused call writes nothing.

  KEYS[1] meta
  KEYS[2] active
  KEYS[3] delayed
  KEYS[4] repeat
  KEYS[5] completed
  KEYS[6] wait
  KEYS[7] paused (legacy list)
  KEYS[8] prioritized
  KEYS[9] failed
  KEYS[10] events
  KEYS[11] marker

  ARGV[1] base key "P:Q:"
  ARGV[2] budget: the most jobs (or scheduler entries) deleted by this call (> 0)
  ARGV[3] "force" to delete active jobs too, else ""
  ARGV[4] "1" to pause the queue when it is not paused (HSET meta paused 1, DEL marker,
          `paused` event), else "0"

  Returns: 1 the budget was used up (call again); 0 done, the queue-level keys are gone.
  Errors: -1 the queue is not paused (and ARGV[4] is "0"); -2 active jobs and no force.
  Both are checked before anything is written.

  Order: active (locks DELed), delayed, repeat (with the repeat:<id> hashes), completed, wait,
  paused, prioritized, failed; each job hard-removed (parent rule, dedup key). With budget
  left, DEL events, delay, stalled-check, stalled, id, pc, marker, meta and the metrics keys.
  Not touched: waiting-children and its jobs, limiter, de:*/dn:* whose owner is already gone.
]]
--@include "remove_job"

local base = ARGV[1]
local budget = tonumber(ARGV[2])
local paused = redis.call("HEXISTS", KEYS[1], "paused") == 1

if not paused and ARGV[4] ~= "1" then
  return -1
end
if ARGV[3] ~= "force" and redis.call("LLEN", KEYS[2]) > 0 then
  return -2
end
if not paused then
  redis.call("HSET", KEYS[1], "paused", 1)
  redis.call("DEL", KEYS[11])
  redis.call("XADD", KEYS[10], "*", "event", "paused")
end

local function take_list(key, drop_locks)
  local ids = redis.call("LRANGE", key, 0, budget - 1)
  for _, id in ipairs(ids) do
    if drop_locks then
      redis.call("DEL", base .. id .. ":lock")
    end
    hard_remove_job(base, id)
  end
  if #ids > 0 then
    redis.call("LTRIM", key, #ids, -1)
  end
  budget = budget - #ids
  return budget <= 0
end

local function take_zset(key)
  local ids = redis.call("ZRANGE", key, 0, budget - 1)
  zrem_ids(key, ids)
  for _, id in ipairs(ids) do
    hard_remove_job(base, id)
  end
  budget = budget - #ids
  return budget <= 0
end

local function take_schedulers(key)
  local ids = redis.call("ZRANGE", key, 0, budget - 1)
  zrem_ids(key, ids)
  for _, id in ipairs(ids) do
    redis.call("DEL", base .. "repeat:" .. id)
  end
  budget = budget - #ids
  return budget <= 0
end

if take_list(KEYS[2], true) or take_zset(KEYS[3]) or take_schedulers(KEYS[4])
  or take_zset(KEYS[5]) or take_list(KEYS[6], false) or take_list(KEYS[7], false)
  or take_zset(KEYS[8]) or take_zset(KEYS[9]) then
  return 1
end

redis.call("DEL", KEYS[10], base .. "delay", base .. "stalled-check", base .. "stalled",
  base .. "id", base .. "pc", KEYS[11], KEYS[1], base .. "metrics:completed",
  base .. "metrics:completed:data", base .. "metrics:failed", base .. "metrics:failed:data")
return 0
