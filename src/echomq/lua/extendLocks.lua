--[[
  extendLocks: renew the locks of many jobs held by one worker
  (docs/protocol/scripts.md#script-extendLocks).

  KEYS[1] stalled

  ARGV[1] base key "P:Q:"
  ARGV[2] lock duration (ms)
  ARGV[3..] pairs: jobId, token

  Returns: the ids whose lock is missing or held by another token (not renewed).
  A renewed job is removed from `stalled`, so the stalled checker will not recover it.
  Renewal uses PEXPIRE, not SET: neither it nor SREM is refused when Redis is out of memory
  under `noeviction`, so locks outlive an OOM episode.
]]
local base = ARGV[1]
local failed = {}
for i = 3, #ARGV, 2 do
  local job_id, token = ARGV[i], ARGV[i + 1]
  local lock_key = base .. job_id .. ":lock"
  if redis.call("GET", lock_key) == token then
    redis.call("PEXPIRE", lock_key, ARGV[2])
    redis.call("SREM", KEYS[1], job_id)
  else
    failed[#failed + 1] = job_id
  end
end
return failed
