--[[
  continueScheduler: create the next iteration of a job scheduler (every or cron) when one of
  its iterations is taken by a worker (docs/protocol/scripts.md#script-continueScheduler; the
  effect of BullMQ's updateJobScheduler). A cron scheduler's next run time comes from the caller.

  KEYS[1]  prefix "P:Q:": the job keys and the scheduler hash `repeat:<id>` are built from it
           (includes/job_keys.lua)
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
  ARGV[2]  id of the iteration the worker took (the producer)
  ARGV[3]  the next iteration's opts (JSON text, stored names): the producer's opts with
           `repeat.count` advanced; `jobId`, `delay` and `timestamp` are set here
  ARGV[4]  now (ms)
  ARGV[5]  next run (ms) of a cron scheduler; "" for an every-scheduler (computed here)

  Returns: the new iteration's id, or "" when nothing was created: the scheduler is gone, is a
  legacy repeatable job (no `ic`), a cron scheduler called without ARGV[5], the producer is not
  its current iteration (stale), or the next iteration exists already (a `duplicated` event is
  written then).
]]
--@include "common"
--@include "job_keys"
--@include "enqueue"
--@include "every_next"

local q = {
  prefix = KEYS[1], ["repeat"] = KEYS[2], id = KEYS[3], meta = KEYS[4], events = KEYS[5],
  wait = KEYS[6], active = KEYS[7], prioritized = KEYS[8], pc = KEYS[9], delayed = KEYS[10],
  marker = KEYS[11],
}
local scheduler_id, producer_id, now = ARGV[1], ARGV[2], tonumber(ARGV[4])
local prev = redis.call("ZSCORE", q["repeat"], scheduler_id)
if not prev then
  return ""
end
prev = tonumber(prev)
local hash_key = scheduler_hash_key(q.prefix, scheduler_id)
local s = redis.call("HMGET", hash_key, "ic", "every", "name", "data", "offset")
local every = tonumber(s[2])
local cron_next = tonumber(ARGV[5])
if not s[1] or (every == nil and cron_next == nil) or (every and every <= 0) then
  return ""
end
if producer_id ~= iteration_id(scheduler_id, prev) then
  return ""
end

local opts = cjson.decode(ARGV[3])
local next_ms
if every then
  local offset = tonumber(s[5])
  if not offset and type(opts["repeat"]) == "table" then
    offset = tonumber(opts["repeat"]["offset"])
  end
  offset = offset or 0
  -- "every next" with a previous iteration: one interval on, or realigned after missed runs.
  next_ms = every_after(prev, every, offset, now)
  next_ms = math.floor(next_ms)
else
  next_ms = cron_next
end

local max_len = max_events(q.meta)
local job_id = iteration_id(scheduler_id, next_ms)
local job_key = job_hash_key(q.prefix, job_id)
if redis.call("EXISTS", job_key) == 1 then
  redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "duplicated",
    "jobId", job_id)
  return ""
end

redis.call("ZADD", q["repeat"], score_str(next_ms), scheduler_id)
redis.call("HINCRBY", hash_key, "ic", 1)
redis.call("INCR", q.id)

local delay = math.max(0, next_ms - now)
opts["jobId"] = job_id
opts["delay"] = delay
opts["timestamp"] = now
local priority = tonumber(opts["priority"]) or 0
local name = s[3] or scheduler_id
redis.call("HSET", job_key, "name", name, "data", s[4] or "{}", "opts", cjson.encode(opts),
  "timestamp", int_str(now), "delay", int_str(delay), "priority", int_str(priority),
  "rjk", scheduler_id)
local gid = group_of_opts(opts)
if gid then
  redis.call("HSET", job_key, "gid", gid)
end
redis.call("XADD", q.events, "*", "event", "added", "jobId", job_id, "name", name)

enqueue_job(q, job_id, delay, next_ms, priority, opts["lifo"] and true or false, max_len,
  nil, gid)
return job_id
