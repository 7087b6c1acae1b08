--[[
  moveJobFromActiveToWait: a processor hit a manual rate limit; put its job back in front
  (docs/protocol/scripts.md#script-moveJobFromActiveToWait). No attempt is counted.

  KEYS[1] active
  KEYS[2] wait
  KEYS[3] stalled
  KEYS[4] meta
  KEYS[5] limiter
  KEYS[6] prioritized
  KEYS[7] marker
  KEYS[8] events

  ARGV[1] base key "P:Q:"
  ARGV[2] jobId
  ARGV[3] lock token ("0" = no lock check)

  Returns: the limiter's PTTL when > 0, else 0.
  Errors: -1 job missing, -2 lock missing, -6 lock held by another token.
]]
--@include "common"

local job_id, token = ARGV[2], ARGV[3]
local job_key = ARGV[1] .. job_id
if redis.call("EXISTS", job_key) == 0 then
  return -1
end
if token ~= "0" then
  local held = redis.call("GET", job_key .. ":lock")
  if held == token then
    redis.call("DEL", job_key .. ":lock")
    redis.call("SREM", KEYS[3], job_id)
  elseif held then
    return -6
  else
    return -2
  end
end
if redis.call("LREM", KEYS[1], 1, job_id) > 0 then
  local priority = tonumber(redis.call("HGET", job_key, "priority")) or 0
  if priority > 0 then
    redis.call("ZADD", KEYS[6], score_str(priority * 4294967296), job_id)
  else
    redis.call("RPUSH", KEYS[2], job_id)
    if not paused_or_maxed(KEYS[4], KEYS[1]) then
      add_base_marker(KEYS[7])
    end
  end
  redis.call("XADD", KEYS[8], "MAXLEN", "~", max_events(KEYS[4]), "*", "event", "waiting",
    "jobId", job_id, "prev", "active")
end
local ttl = redis.call("PTTL", KEYS[5])
if ttl > 0 then
  return ttl
end
return 0
