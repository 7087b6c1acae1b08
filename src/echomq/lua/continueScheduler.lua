--[[
  continueScheduler: create the next iteration of an `every` job scheduler when one of its
  iterations is taken by a worker (docs/protocol/scripts.md#script-continueScheduler; the
  effect of BullMQ's updateJobScheduler for every-schedulers). Cron schedulers are not handled here.

  KEYS[1]  base key "P:Q:"; `repeat`, `repeat:<id>`, the job keys and the state keys are
           derived from it

  ARGV[1]  scheduler id
  ARGV[2]  id of the iteration the worker took (the producer)
  ARGV[3]  the next iteration's opts (JSON text, stored names): the producer's opts with
           `repeat.count` advanced; `jobId`, `delay` and `timestamp` are set here
  ARGV[4]  now (ms)

  Returns: the new iteration's id, or "" when nothing was created: the scheduler is gone, is a
  legacy repeatable job or a cron scheduler, the producer is not its current iteration (stale),
  or the next iteration exists already (a `duplicated` event is written then).
]]
--@include "common"
--@include "enqueue"

local base = KEYS[1]
local scheduler_id, producer_id, now = ARGV[1], ARGV[2], tonumber(ARGV[4])
local k_repeat = base .. "repeat"
local prev = redis.call("ZSCORE", k_repeat, scheduler_id)
if not prev then
  return ""
end
prev = tonumber(prev)
local hash_key = k_repeat .. ":" .. scheduler_id
local s = redis.call("HMGET", hash_key, "ic", "every", "name", "data", "offset")
local every = tonumber(s[2])
if not s[1] or not every or every <= 0 then
  return ""
end
if producer_id ~= "repeat:" .. scheduler_id .. ":" .. score_str(prev) then
  return ""
end

local opts = cjson.decode(ARGV[3])
local offset = tonumber(s[5])
if not offset and type(opts["repeat"]) == "table" then
  offset = tonumber(opts["repeat"]["offset"])
end
offset = offset or 0

-- "every next" with a previous iteration: one interval on, or realigned after missed runs.
local next_ms = prev + every
if next_ms < now then
  local aligned = math.floor(now / every) * every + offset
  if aligned <= now then
    next_ms = aligned + every
  else
    next_ms = aligned
  end
end
next_ms = math.floor(next_ms)

local k_meta, k_events = base .. "meta", base .. "events"
local max_len = max_events(k_meta)
local job_id = "repeat:" .. scheduler_id .. ":" .. score_str(next_ms)
local job_key = base .. job_id
if redis.call("EXISTS", job_key) == 1 then
  redis.call("XADD", k_events, "MAXLEN", "~", max_len, "*", "event", "duplicated",
    "jobId", job_id)
  return ""
end

redis.call("ZADD", k_repeat, score_str(next_ms), scheduler_id)
redis.call("HINCRBY", hash_key, "ic", 1)
redis.call("INCR", base .. "id")

local delay = math.max(0, next_ms - now)
opts["jobId"] = job_id
opts["delay"] = delay
opts["timestamp"] = now
local priority = tonumber(opts["priority"]) or 0
local name = s[3] or scheduler_id
redis.call("HSET", job_key, "name", name, "data", s[4] or "{}", "opts", cjson.encode(opts),
  "timestamp", int_str(now), "delay", int_str(delay), "priority", int_str(priority),
  "rjk", scheduler_id)
redis.call("XADD", k_events, "*", "event", "added", "jobId", job_id, "name", name)

enqueue_job(base, job_id, delay, next_ms, priority, opts["lifo"] and true or false, max_len,
  nil)
return job_id
