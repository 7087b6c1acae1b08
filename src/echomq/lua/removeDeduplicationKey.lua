--[[
  removeDeduplicationKey: close a deduplication window only if the given job owns it
  (docs/protocol/scripts.md#script-removeDeduplicationKey).

  KEYS[1] dedup key

  ARGV[1] job id

  Returns: 1 if the key held this job id and was deleted, 0 otherwise (missing, or owned by
  another job).
  Errors: none.
]]

if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
