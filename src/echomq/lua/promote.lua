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

  Returns: 0.
  Errors: -3 the job is not in `delayed`.

  Priority 0 goes to the back of `wait` (LPUSH), else to `prioritized` with a fresh counter;
  `delay` is set to 0 and `timestamp` is kept.
]]
--@include "common"
--@include "requeue"

local job_id = ARGV[1]
if redis.call("ZREM", KEYS[2], job_id) == 0 then
  return -3
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
