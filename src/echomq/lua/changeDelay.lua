--[[
  changeDelay: reschedule a delayed job to run `delay` ms from now
  (docs/protocol/scripts.md#script-changeDelay).

  KEYS[1] job hash
  KEYS[2] delayed
  KEYS[3] meta
  KEYS[4] marker
  KEYS[5] events

  ARGV[1] job id
  ARGV[2] the new delay (ms, >= 0)
  ARGV[3] now (ms)

  Returns: 0.
  Errors: -1 the job does not exist; -3 the job is not in `delayed`.
]]
--@include "common"

local job_id = ARGV[1]
if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
if redis.call("ZREM", KEYS[2], job_id) == 0 then
  return -3
end
local due = tonumber(ARGV[3]) + tonumber(ARGV[2])
redis.call("HSET", KEYS[1], "delay", ARGV[2])
redis.call("ZADD", KEYS[2], score_str(delayed_score(KEYS[2], due)), job_id)
redis.call("XADD", KEYS[5], "MAXLEN", "~", max_events(KEYS[3]), "*",
  "event", "delayed", "jobId", job_id, "delay", int_str(due))
refresh_delay_marker(KEYS[4], KEYS[2])
return 0
