--[[
  updateData: replace a job's payload (docs/protocol/scripts.md#script-updateData).

  KEYS[1] job hash

  ARGV[1] data (JSON text, validated by the caller)

  Returns: 0.
  Errors: -1 the job does not exist. No event is emitted.
]]

if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
redis.call("HSET", KEYS[1], "data", ARGV[1])
return 0
