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
  Errors: -1 the queue is not paused (and ARGV[3] is "0"); -2 active jobs (in active or
  groups:active) and no force. Both are checked before anything is written.

  Order: active (locks DELed), groups:active (locks DELed), delayed, groups:delayed, repeat
  (with the repeat:<id> hashes), completed, wait, paused, prioritized, groups:waiting, failed;
  each job hard-removed (parent rule, dedup key). Then the group keys (docs/protocol/groups.md),
  one budget unit per group: groups:wait:<gid> and groups:limit:<gid> of every group named in
  groups, groups:limited, groups:ready or a field of groups:state. With budget left, DEL
  events, delay, stalled-check, stalled, id, pc, marker, meta, the metrics keys and the fixed
  group keys. Not touched: limiter and a groups:limit:<gid> of a group named nowhere (both
  expire), de:*/dn:* whose owner is already gone, and waiting-children and its jobs, except a
  parent whose last pending child is removed here (deleted by the parent rule).
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
local g = group_keys(q.prefix)
local budget = tonumber(ARGV[1])
local paused = redis.call("HEXISTS", q.meta, "paused") == 1

if not paused and ARGV[3] ~= "1" then
  return -1
end
if ARGV[2] ~= "force"
  and (redis.call("LLEN", q.active) > 0 or redis.call("LLEN", g.active) > 0) then
  return -2
end
if not paused then
  redis.call("HSET", q.meta, "paused", 1)
  redis.call("DEL", q.marker)
  redis.call("XADD", q.events, "*", "event", "paused")
end

-- Each call takes at most `budget` ids from the head of `key`, passes each to `remove` and
-- reports whether the budget is used up.
local function take_list(key, remove)
  local ids = redis.call("LRANGE", key, 0, budget - 1)
  for _, id in ipairs(ids) do
    remove(id)
  end
  if #ids > 0 then
    redis.call("LTRIM", key, #ids, -1)
  end
  budget = budget - #ids
  return budget <= 0
end

local function take_zset(key, remove)
  local ids = redis.call("ZRANGE", key, 0, budget - 1)
  zrem_ids(key, ids)
  for _, id in ipairs(ids) do
    remove(id)
  end
  budget = budget - #ids
  return budget <= 0
end

local function drop_job(id)
  hard_remove_job(q, id)
end

local function drop_active_job(id)
  redis.call("DEL", job_part_key(job_hash_key(q.prefix, id), "lock"))
  hard_remove_job(q, id)
end

local function drop_scheduler(id)
  redis.call("DEL", scheduler_hash_key(q.prefix, id))
end

-- A group's own keys: its waiting jobs (already deleted), its counter and its rate window.
local function drop_group(gid)
  if gid ~= "" then
    redis.call("DEL", group_wait_key(q.prefix, gid), group_prio_key(q.prefix, gid),
      group_run_key(q.prefix, gid), group_limit_key(q.prefix, gid))
  end
end

-- The groups named by a field of groups:state ("a:<gid>", "p:<gid>", "c:<gid>",
-- "r:<gid>"): their keys are dropped and the field deleted; "seq", "c" and "r" stay until the
-- hash is deleted.
local function take_group_fields()
  local cursor = "0"
  repeat
    local reply = redis.call("HSCAN", g.state, cursor, "COUNT", budget)
    cursor = reply[1]
    local named = {}
    for i = 1, #reply[2], 2 do
      local field = reply[2][i]
      local sep = string.find(field, ":", 1, true)
      if sep then
        drop_group(string.sub(field, sep + 1))
        named[#named + 1] = field
      end
    end
    if #named > 0 then
      redis.call("HDEL", g.state, unpack(named))
    end
    budget = budget - #named
  until cursor == "0" or budget <= 0
  return budget <= 0
end

if take_list(q.active, drop_active_job) or take_list(g.active, drop_active_job)
  or take_zset(q.delayed, drop_job) or take_zset(g.delayed, drop_job)
  or take_zset(q["repeat"], drop_scheduler) or take_zset(q.completed, drop_job)
  or take_list(q.wait, drop_job) or take_list(q.paused, drop_job)
  or take_zset(q.prioritized, drop_job) or take_zset(g.waiting, drop_job)
  or take_zset(q.failed, drop_job) or take_zset(g.index, drop_group)
  or take_zset(g.limited, drop_group) or take_list(g.ready, drop_group)
  or take_group_fields() then
  return 1
end

redis.call("DEL", q.events, q.delay, q.stalled_check, q.stalled, q.id, q.pc, q.marker, q.meta,
  q.metrics_completed, q.metrics_completed_data, q.metrics_failed, q.metrics_failed_data,
  g.index, g.ready, g.active, g.stalled, g.delayed, g.waiting, g.state, g.limited)
return 0
