--[[
  moveToWaitingChildren: an active job parks itself until its pending children finish
  (docs/protocol/scripts.md#script-moveToWaitingChildren).

  KEYS[1] prefix "P:Q:": the job key, its :lock, :dependencies and :unsuccessful are built
          from it (includes/job_keys.lua)
  KEYS[2] active
  KEYS[3] waiting-children
  KEYS[4] stalled
  KEYS[5] events

  ARGV[1] job id
  ARGV[2] lock token ("0" = no lock check)
  ARGV[3] full key of the one child to wait for, or "" to wait for any pending child
  ARGV[4] now (ms)

  Returns: 0 the job moved to waiting-children; 1 nothing to wait for (no pending child, or the
  child named is not pending), nothing written.
  Errors: -1 job missing, -9 the job has failed (fpof) children, -6 lock held by another token,
  -2 lock missing, -3 job not in active. Nothing is written when it refuses. A grouped job
  leaves `groups:active` and frees its group's slot (docs/protocol/groups.md#groups-rules).
]]
--@include "common"
--@include "job_keys"
--@include "groups"

local q = {prefix = KEYS[1], active = KEYS[2], waiting_children = KEYS[3], stalled = KEYS[4],
  events = KEYS[5]}
local job_id, token, child_key, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local job_key = job_hash_key(q.prefix, job_id)

if redis.call("EXISTS", job_key) == 0 then
  return -1
end
if redis.call("ZCARD", job_part_key(job_key, "unsuccessful")) > 0 then
  return -9
end
local deps_key = job_part_key(job_key, "dependencies")
if child_key ~= "" then
  if redis.call("SISMEMBER", deps_key, child_key) == 0 then
    return 1
  end
elseif redis.call("SCARD", deps_key) == 0 then
  return 1
end
local lock_key = job_part_key(job_key, "lock")
if token ~= "0" then
  local held = redis.call("GET", lock_key)
  if not held then
    return -2
  elseif held ~= token then
    return -6
  end
end
-- The first write: refusing here leaves everything as it was.
if redis.call("LREM", q.active, -1, job_id) == 0 then
  local g = group_keys(q.prefix)
  local gid = redis.call("HGET", job_key, "gid")
  if not gid or redis.call("LREM", g.active, -1, job_id) == 0 then
    return -3
  end
  redis.call("SREM", g.stalled, job_id)
  group_release(g, gid, job_id, tonumber(now))
end
if token ~= "0" then
  redis.call("DEL", lock_key)
  redis.call("SREM", q.stalled, job_id)
end
redis.call("ZADD", q.waiting_children, now, job_id)
redis.call("XADD", q.events, "*", "event", "waiting-children", "jobId", job_id, "prev", "active")
return 0
