--[[
  moveJobFromActiveToWait: a processor hit a manual rate limit; put its job back in front
  (docs/protocol/scripts.md#script-moveJobFromActiveToWait). No attempt is counted. A grouped
  job goes back to the front of its group (docs/protocol/groups.md#groups-rules).

  KEYS[1] prefix "P:Q:": the job key and its lock are built from it (includes/job_keys.lua)
  KEYS[2] active
  KEYS[3] wait
  KEYS[4] stalled
  KEYS[5] meta
  KEYS[6] limiter
  KEYS[7] prioritized
  KEYS[8] marker
  KEYS[9] events

  ARGV[1] jobId
  ARGV[2] lock token ("0" = no lock check)

  Returns: the limiter's PTTL when > 0, else 0.
  Errors: -1 job missing, -2 lock missing, -6 lock held by another token.
]]
--@include "common"
--@include "job_keys"
--@include "groups"

local q = {
  prefix = KEYS[1], active = KEYS[2], wait = KEYS[3], stalled = KEYS[4], meta = KEYS[5],
  limiter = KEYS[6], prioritized = KEYS[7], marker = KEYS[8], events = KEYS[9],
}
local job_id, token = ARGV[1], ARGV[2]
local job_key = job_hash_key(q.prefix, job_id)
if redis.call("EXISTS", job_key) == 0 then
  return -1
end
if token ~= "0" then
  local lock_key = job_part_key(job_key, "lock")
  local held = redis.call("GET", lock_key)
  if held == token then
    redis.call("DEL", lock_key)
    redis.call("SREM", q.stalled, job_id)
  elseif held then
    return -6
  else
    return -2
  end
end
local g = group_keys(q.prefix)
local gid = redis.call("HGET", job_key, "gid")
if gid and redis.call("LREM", g.active, 1, job_id) > 0 then
  -- a grouped job: back to the front of its group (docs/protocol/groups.md#groups-rules)
  redis.call("SREM", g.stalled, job_id)
  group_release(g, gid, job_id, group_server_now())
  group_place(g, job_id, gid, tonumber(redis.call("HGET", job_key, "priority")) or 0, true,
    tonumber(redis.call("HGET", job_key, "timestamp")) or 0)
  if not paused_or_maxed(q.meta, q.active) then
    add_base_marker(q.marker)
  end
  redis.call("XADD", q.events, "MAXLEN", "~", max_events(q.meta), "*", "event", "waiting",
    "jobId", job_id, "prev", "active")
elseif redis.call("LREM", q.active, 1, job_id) > 0 then
  local priority = tonumber(redis.call("HGET", job_key, "priority")) or 0
  if priority > 0 then
    redis.call("ZADD", q.prioritized, score_str(priority * 4294967296), job_id)
  else
    redis.call("RPUSH", q.wait, job_id)
    if not paused_or_maxed(q.meta, q.active) then
      add_base_marker(q.marker)
    end
  end
  redis.call("XADD", q.events, "MAXLEN", "~", max_events(q.meta), "*", "event", "waiting",
    "jobId", job_id, "prev", "active")
end
local ttl = redis.call("PTTL", q.limiter)
if ttl > 0 then
  return ttl
end
return 0
