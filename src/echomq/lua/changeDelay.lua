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
  Errors: -1 the job does not exist; -3 the job is not in `delayed` (nor, grouped, in
  groups:delayed).

  A grouped job (docs/protocol/groups.md), taken from groups:delayed when `delayed` does not
  hold it, is re-scored there (group_delay: the delay marker only moves earlier); the group keys
  are built from the prefix, KEYS[1] less the job id.
]]
--@include "groups_admin"

local job_id = ARGV[1]
if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
local due = tonumber(ARGV[3]) + tonumber(ARGV[2])
if redis.call("ZREM", KEYS[2], job_id) == 0 then
  local g = group_keys(prefix_of(KEYS[1], job_id))
  if redis.call("ZREM", g.delayed, job_id) == 0 then
    return -3
  end
  redis.call("HSET", KEYS[1], "delay", ARGV[2])
  group_delay(g, KEYS[4], job_id, due)
  redis.call("XADD", KEYS[5], "MAXLEN", "~", max_events(KEYS[3]), "*",
    "event", "delayed", "jobId", job_id, "delay", int_str(due))
  return 0
end
redis.call("HSET", KEYS[1], "delay", ARGV[2])
redis.call("ZADD", KEYS[2], score_str(delayed_score(KEYS[2], due)), job_id)
redis.call("XADD", KEYS[5], "MAXLEN", "~", max_events(KEYS[3]), "*",
  "event", "delayed", "jobId", job_id, "delay", int_str(due))
refresh_delay_marker(KEYS[4], KEYS[2])
return 0
