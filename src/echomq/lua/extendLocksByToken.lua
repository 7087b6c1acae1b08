--[[
  extendLocksByToken: renew the locks of the jobs a worker's fetch took, known by their tokens
  only, while the worker has not read that fetch's reply
  (docs/protocol/scripts.md#script-extendLocksByToken).

  KEYS[1] prefix "P:Q:": job and group keys are built from it (includes/job_keys.lua)
  KEYS[2] stalled
  KEYS[3] active

  ARGV[1] lock duration (ms)
  ARGV[2..] tokens

  Returns: flat {id, token, ...}: the jobs of `active` (and of the groups' active list) whose
  lock holds one of the tokens, each renewed (PEXPIRE) and removed from the suspects.
]]
--@include "job_keys"
--@include "locks"

local prefix, k_stalled, k_active, lock_ms = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local tokens = {}
for i = 2, #ARGV do
  tokens[ARGV[i]] = true
end
local g = group_keys(prefix)
local grouped = redis.call("EXISTS", g.state) == 1
local renewed = {}
for _, job in ipairs(jobs_locked_by(prefix, k_active, grouped and g.active or nil, tokens)) do
  local id = job[1]
  redis.call("PEXPIRE", job_part_key(job_hash_key(prefix, id), "lock"), lock_ms)
  redis.call("SREM", k_stalled, id)
  if grouped then
    redis.call("SREM", g.stalled, id)
  end
  renewed[#renewed + 1] = id
  renewed[#renewed + 1] = job[2]
end
return renewed
