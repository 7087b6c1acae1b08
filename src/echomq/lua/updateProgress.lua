--[[
  updateProgress: record a job's progress and announce it
  (docs/protocol/scripts.md#script-updateProgress).

  KEYS[1] job hash
  KEYS[2] events
  KEYS[3] meta

  ARGV[1] job id
  ARGV[2] progress (JSON text: a number or an object)

  Returns: 0.
  Errors: -1 the job does not exist.
]]
--@include "common"

if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
redis.call("HSET", KEYS[1], "progress", ARGV[2])
redis.call("XADD", KEYS[2], "MAXLEN", "~", max_events(KEYS[3]), "*",
  "event", "progress", "jobId", ARGV[1], "data", ARGV[2])
return 0
