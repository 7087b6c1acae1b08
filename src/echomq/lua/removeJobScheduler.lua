--[[
  removeJobScheduler: delete a job scheduler (or a legacy repeatable job) and its delayed next
  iteration (docs/protocol/scripts.md#script-removeJobScheduler; BullMQ's removeJobScheduler).

  KEYS[1]  prefix "P:Q:": the scheduler hash `repeat:<id>` and the iteration's job keys are
           built from it (includes/job_keys.lua)
  KEYS[2]  repeat
  KEYS[3]  delayed
  KEYS[4]  events

  ARGV[1]  scheduler id

  Returns: 0 removed; 1 no such scheduler.

  Effects: a next iteration still in `delayed` is deleted with a `removed` event (prev
  `delayed`, no MAXLEN); one already waiting or active is left to run once more (its
  continuation finds no scheduler). The id leaves `repeat` and its hash is deleted. A grouped
  iteration (docs/protocol/groups.md) is looked for in `groups:delayed` as well.
]]
--@include "remove_job"

local q = {prefix = KEYS[1], ["repeat"] = KEYS[2], delayed = KEYS[3], events = KEYS[4]}
local scheduler_id = ARGV[1]
local millis = redis.call("ZSCORE", q["repeat"], scheduler_id)
if millis then
  local pending = iteration_id(scheduler_id, millis)
  local pending_key = job_hash_key(q.prefix, pending)
  local grouped = redis.call("HEXISTS", pending_key, "gid") == 1
  if redis.call("ZREM", q.delayed, pending) == 1
    or (grouped and redis.call("ZREM", group_keys(q.prefix).delayed, pending) == 1) then
    release_dedup_key(q.prefix, pending_key, pending)
    delete_job_keys(pending_key)
    redis.call("XADD", q.events, "*", "event", "removed", "jobId", pending, "prev", "delayed")
  end
end
if redis.call("ZREM", q["repeat"], scheduler_id) == 1 then
  redis.call("DEL", scheduler_hash_key(q.prefix, scheduler_id))
  return 0
end
return 1
