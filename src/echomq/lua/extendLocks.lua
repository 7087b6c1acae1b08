--[[
  extendLocks: renew the locks of many jobs held by one worker
  (docs/protocol/scripts.md#script-extendLocks).

  KEYS[1] prefix "P:Q:": the lock keys "P:Q:<id>:lock" are built from it
          (includes/job_keys.lua)
  KEYS[2] stalled

  ARGV[1] lock duration (ms)
  ARGV[2..] pairs: jobId, token

  Returns: the ids whose lock is missing or held by another token (not renewed).
  A renewed job is removed from `stalled`, so the stalled checker will not recover it.
  Renewal uses PEXPIRE, not SET: neither it nor SREM is refused when Redis is out of memory
  under `noeviction`, so locks outlive an OOM episode.
]]
--@include "job_keys"

local prefix, k_stalled, lock_ms = KEYS[1], KEYS[2], ARGV[1]
local failed = {}
for i = 2, #ARGV, 2 do
  local job_id, token = ARGV[i], ARGV[i + 1]
  local lock_key = job_part_key(job_hash_key(prefix, job_id), "lock")
  if redis.call("GET", lock_key) == token then
    redis.call("PEXPIRE", lock_key, lock_ms)
    redis.call("SREM", k_stalled, job_id)
  else
    failed[#failed + 1] = job_id
  end
end
return failed
