--[[
  promote: make a delayed job ready now (docs/protocol/scripts.md#script-promote).

  KEYS[1] job hash
  KEYS[2] delayed
  KEYS[3] wait
  KEYS[4] meta
  KEYS[5] prioritized
  KEYS[6] active
  KEYS[7] pc
  KEYS[8] events
  KEYS[9] marker

  ARGV[1] job id
  ARGV[2] now (ms): when a grouped job becomes waiting

  Returns: 0.
  Errors: -3 the job is not in `delayed` (nor, grouped, in groups:delayed).

  Priority 0 goes to the back of `wait` (LPUSH), else to `prioritized` with a fresh counter;
  `delay` is set to 0 and `timestamp` is kept. A grouped job (docs/protocol/groups.md), taken
  from groups:delayed when `delayed` does not hold it, goes to its group instead (group_place,
  by its priority; the group keys are built from the prefix, KEYS[1] less the job id).
]]
--@include "common"
--@include "requeue"
--@include "groups_admin"

local job_id = ARGV[1]
if redis.call("ZREM", KEYS[2], job_id) == 0 then
  local g = group_keys(prefix_of(KEYS[1], job_id))
  local f = redis.call("HMGET", KEYS[1], "gid", "priority")
  if not f[1] or redis.call("ZREM", g.delayed, job_id) == 0 then
    return -3
  end
  group_place(g, job_id, f[1], tonumber(f[2]) or 0, false, tonumber(ARGV[2]))
  if not paused_or_maxed(KEYS[4], KEYS[6]) then
    add_base_marker(KEYS[9])
  end
  redis.call("XADD", KEYS[8], "*", "event", "waiting", "jobId", job_id, "prev", "delayed")
  redis.call("HSET", KEYS[1], "delay", 0)
  return 0
end
-- a pre-v6 "0:" delay marker at the head of wait would be served as a job id
local head = redis.call("LINDEX", KEYS[3], 0)
if head and string.sub(head, 1, 2) == "0:" then
  redis.call("LPOP", KEYS[3])
end

local priority = tonumber(redis.call("HGET", KEYS[1], "priority")) or 0
requeue_ready(KEYS[3], KEYS[5], KEYS[7], KEYS[9], paused_or_maxed(KEYS[4], KEYS[6]),
  priority, job_id, "LPUSH")
redis.call("XADD", KEYS[8], "*", "event", "waiting", "jobId", job_id, "prev", "delayed")
redis.call("HSET", KEYS[1], "delay", 0)
return 0
