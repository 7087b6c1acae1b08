--[[
  obliterate: delete a whole queue, spending at most a budget of jobs per call
  (docs/protocol/scripts.md#script-obliterate). With ARGV[3] = "1" an unpaused queue is paused
  first, in the same atomic step, so a refused call writes nothing.

  KEYS[1]  prefix "P:Q:": job keys, their locks, dedup keys and the scheduler hashes
           repeat:<id> are built from it (includes/job_keys.lua); a parent in another queue
           has its keys derived from its job reference
  KEYS[2]  meta
  KEYS[3]  active
  KEYS[4]  delayed
  KEYS[5]  repeat
  KEYS[6]  completed
  KEYS[7]  wait
  KEYS[8]  paused (legacy list)
  KEYS[9]  prioritized
  KEYS[10] failed
  KEYS[11] events
  KEYS[12] marker
  KEYS[13] waiting-children (a parent in this queue released by a removed child leaves it)
  KEYS[14] delay (a BullMQ 1-4 key, deleted at the end)
  KEYS[15] stalled-check
  KEYS[16] stalled
  KEYS[17] id
  KEYS[18] pc
  KEYS[19] metrics:completed
  KEYS[20] metrics:completed:data
  KEYS[21] metrics:failed
  KEYS[22] metrics:failed:data

  ARGV[1]  budget: the most jobs (or scheduler entries) deleted by this call (> 0)
  ARGV[2]  "force" to delete active jobs too, else ""
  ARGV[3]  "1" to pause the queue when it is not paused (HSET meta paused 1, DEL marker,
           `paused` event), else "0"

  Returns: 1 the budget was used up (call again); 0 done, the queue-level keys are gone.
  Errors: -1 the queue is not paused (and ARGV[3] is "0"); -2 active jobs and no force.
  Both are checked before anything is written.

  Order: active (locks DELed), delayed, repeat (with the repeat:<id> hashes), completed, wait,
  paused, prioritized, failed; each job hard-removed (parent rule, dedup key). With budget
  left, DEL events, delay, stalled-check, stalled, id, pc, marker, meta and the metrics keys.
  Not touched: limiter, de:*/dn:* whose owner is already gone, and waiting-children and its
  jobs, except a parent whose last pending child is removed here (deleted by the parent rule).
]]
--@include "remove_job"

local q = {
  prefix = KEYS[1], meta = KEYS[2], active = KEYS[3], delayed = KEYS[4], ["repeat"] = KEYS[5],
  completed = KEYS[6], wait = KEYS[7], paused = KEYS[8], prioritized = KEYS[9],
  failed = KEYS[10], events = KEYS[11], marker = KEYS[12], waiting_children = KEYS[13],
  delay = KEYS[14], stalled_check = KEYS[15], stalled = KEYS[16], id = KEYS[17], pc = KEYS[18],
  metrics_completed = KEYS[19], metrics_completed_data = KEYS[20], metrics_failed = KEYS[21],
  metrics_failed_data = KEYS[22],
}
local budget = tonumber(ARGV[1])
local paused = redis.call("HEXISTS", q.meta, "paused") == 1

if not paused and ARGV[3] ~= "1" then
  return -1
end
if ARGV[2] ~= "force" and redis.call("LLEN", q.active) > 0 then
  return -2
end
if not paused then
  redis.call("HSET", q.meta, "paused", 1)
  redis.call("DEL", q.marker)
  redis.call("XADD", q.events, "*", "event", "paused")
end

local function take_list(key, drop_locks)
  local ids = redis.call("LRANGE", key, 0, budget - 1)
  for _, id in ipairs(ids) do
    if drop_locks then
      redis.call("DEL", job_part_key(job_hash_key(q.prefix, id), "lock"))
    end
    hard_remove_job(q, id)
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
    hard_remove_job(q, id)
  end
  budget = budget - #ids
  return budget <= 0
end

local function take_schedulers(key)
  local ids = redis.call("ZRANGE", key, 0, budget - 1)
  zrem_ids(key, ids)
  for _, id in ipairs(ids) do
    redis.call("DEL", scheduler_hash_key(q.prefix, id))
  end
  budget = budget - #ids
  return budget <= 0
end

if take_list(q.active, true) or take_zset(q.delayed) or take_schedulers(q["repeat"])
  or take_zset(q.completed) or take_list(q.wait, false) or take_list(q.paused, false)
  or take_zset(q.prioritized) or take_zset(q.failed) then
  return 1
end

redis.call("DEL", q.events, q.delay, q.stalled_check, q.stalled, q.id, q.pc, q.marker, q.meta,
  q.metrics_completed, q.metrics_completed_data, q.metrics_failed, q.metrics_failed_data)
return 0
