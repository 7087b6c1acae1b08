--[[
  addJobScheduler: create or replace a job scheduler and its next iteration
  (docs/protocol/scripts.md#script-addJobScheduler; the effect of BullMQ's addJobScheduler).

  KEYS[1]  prefix "P:Q:": the scheduler hash `repeat:<id>` and the iteration's job keys are
           built from it (includes/job_keys.lua)
  KEYS[2]  repeat
  KEYS[3]  id
  KEYS[4]  meta
  KEYS[5]  events
  KEYS[6]  wait
  KEYS[7]  active
  KEYS[8]  prioritized
  KEYS[9]  pc
  KEYS[10] delayed
  KEYS[11] marker

  ARGV[1]  scheduler id
  ARGV[2]  next run (ms) of a cron scheduler; "" for an every-scheduler (computed here)
  ARGV[3]  scheduler fields (JSON object): name, every (ms) or pattern, and when set tz,
           startDate, endDate (ms), limit, offset (ms)
  ARGV[4]  template data (JSON text)
  ARGV[5]  template options (JSON text, stored names), or "" when there are none
  ARGV[6]  the iteration's opts (JSON text, stored names): template options plus `repeat`,
           `repeatJobKey` (and `prevMillis` for cron); `jobId`, `delay`, `timestamp` are set here
  ARGV[7]  now (ms)

  Returns: {iteration id, delay ms}.
  Errors: -10 a job with the cron iteration's id exists; -11 an every-scheduler found its
  next 32 slots taken.

  Effects: the scheduler's pending iteration (in delayed, prioritized or wait) is deleted
  without an event; an every-scheduler whose interval did not change keeps its slot. The hash
  is rewritten whole, keeping `ic` (1 when new). The iteration is stored and placed as an add
  (`added`, then `delayed` or `waiting`).
]]
--@include "remove_job"
--@include "enqueue"
--@include "every_next"

local q = {
  prefix = KEYS[1], ["repeat"] = KEYS[2], id = KEYS[3], meta = KEYS[4], events = KEYS[5],
  wait = KEYS[6], active = KEYS[7], prioritized = KEYS[8], pc = KEYS[9], delayed = KEYS[10],
  marker = KEYS[11],
}
local scheduler_id, now = ARGV[1], tonumber(ARGV[7])
local s = cjson.decode(ARGV[3])
local every = tonumber(s["every"])
local hash_key = scheduler_hash_key(q.prefix, scheduler_id)
local old = redis.call("HMGET", hash_key, "every", "ic", "offset")
local prev = redis.call("ZSCORE", q["repeat"], scheduler_id)
prev = prev and tonumber(prev) or nil

local next_ms, new_offset
if every then
  local base = prev
  if tonumber(old[1]) ~= every then
    base = nil -- the interval changed: start again as a new scheduler
  end
  next_ms, new_offset = every_next(base, every, tonumber(s["offset"]) or 0, now,
    tonumber(s["startDate"]))
else
  next_ms = tonumber(ARGV[2])
  new_offset = 0
end

-- The pending iteration of the scheduler is replaced, never doubled.
local removed = false
if prev then
  local pending = iteration_id(scheduler_id, prev)
  local pending_key = job_hash_key(q.prefix, pending)
  if redis.call("EXISTS", pending_key) == 1 then
    local pending_gid = redis.call("HGET", pending_key, "gid")
    local g = pending_gid and group_keys(q.prefix)
    if redis.call("ZREM", q.delayed, pending) == 1
      or redis.call("ZREM", q.prioritized, pending) == 1
      or redis.call("LREM", q.wait, 0, pending) > 0
      or (g and (redis.call("ZREM", g.delayed, pending) == 1
        or group_unwait(g, pending_gid, pending))) then
      release_dedup_key(q.prefix, pending_key, pending)
      delete_job_keys(pending_key)
      removed = true
    end
  end
  if removed and every and tonumber(old[1]) == every then
    next_ms = prev
  end
end

local job_id = iteration_id(scheduler_id, next_ms)
if redis.call("EXISTS", job_hash_key(q.prefix, job_id)) == 1 then
  if not every then
    return -10
  end
  local free = false
  for _ = 1, 32 do
    next_ms = next_ms + every
    job_id = iteration_id(scheduler_id, next_ms)
    if redis.call("EXISTS", job_hash_key(q.prefix, job_id)) == 0 then
      free = true
      break
    end
  end
  if not free then
    return -11
  end
end

-- The scheduler hash, rewritten whole; `ic` survives upserts.
local stored_offset = s["offset"]
if stored_offset == nil then
  stored_offset = (removed and tonumber(old[3])) or new_offset
end
redis.call("ZADD", q["repeat"], score_str(next_ms), scheduler_id)
redis.call("DEL", hash_key)
local fields = {"name", s["name"]}
for _, field in ipairs({"every", "pattern", "tz", "startDate", "endDate", "limit"}) do
  local value = s[field]
  if value ~= nil then
    fields[#fields + 1] = field
    fields[#fields + 1] = type(value) == "number" and score_str(value) or value
  end
end
fields[#fields + 1] = "offset"
fields[#fields + 1] = score_str(stored_offset)
if ARGV[5] ~= "" then
  fields[#fields + 1] = "opts"
  fields[#fields + 1] = ARGV[5]
end
if ARGV[4] ~= "{}" then
  fields[#fields + 1] = "data"
  fields[#fields + 1] = ARGV[4]
end
fields[#fields + 1] = "ic"
fields[#fields + 1] = old[2] or "1"
redis.call("HSET", hash_key, unpack(fields))

-- The iteration job.
redis.call("INCR", q.id)
local delay = math.max(0, next_ms - now)
local opts = cjson.decode(ARGV[6])
opts["jobId"] = job_id
opts["delay"] = delay
opts["timestamp"] = now
if opts["prevMillis"] ~= nil then
  opts["prevMillis"] = next_ms
end
local priority = tonumber(opts["priority"]) or 0
local job_key = job_hash_key(q.prefix, job_id)
redis.call("HSET", job_key, "name", s["name"], "data", ARGV[4], "opts", cjson.encode(opts),
  "timestamp", int_str(now), "delay", int_str(delay), "priority", int_str(priority),
  "rjk", scheduler_id)
local gid = group_of_opts(opts)
if gid then
  redis.call("HSET", job_key, "gid", gid)
end
redis.call("XADD", q.events, "*", "event", "added", "jobId", job_id, "name", s["name"])
enqueue_job(q, job_id, delay, next_ms, priority, opts["lifo"] and true or false,
  max_events(q.meta), nil, gid)
return {job_id, delay}
