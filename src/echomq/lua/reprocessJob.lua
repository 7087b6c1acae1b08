--[[
  reprocessJob: send a completed or failed job back to be processed again
  (docs/protocol/scripts.md#script-reprocessJob; 6.7.0 semantics: a job with a priority returns
  to `prioritized`).

  KEYS[1] job hash
  KEYS[2] events
  KEYS[3] the state it is in: completed or failed
  KEYS[4] wait
  KEYS[5] meta
  KEYS[6] active
  KEYS[7] marker
  KEYS[8] prioritized
  KEYS[9] pc

  ARGV[1] job id
  ARGV[2] "LPUSH", or "RPUSH" for a lifo job
  ARGV[3] the result field to clear: "failedReason" or "returnvalue"
  ARGV[4] the previous state: "failed" or "completed"
  ARGV[5] "1" to reset attemptsMade (atm)
  ARGV[6] "1" to reset attemptsStarted (ats)
  ARGV[7] now (ms): when a grouped job becomes waiting

  Returns: 1.
  Errors: -1 the job does not exist; -3 the job is not in KEYS[3].

  A child whose parent still exists goes back into the parent's `:dependencies` when its
  result is taken out of the parent's `:processed` (completed) or `:unsuccessful` / `:failed`
  (failed). stacktrace, stc and defa are left as they are.

  A grouped job (its hash has `gid`; docs/protocol/groups.md) returns to its group
  (group_place, by its priority, at the front of it with "RPUSH") instead of wait / prioritized;
  the group keys are built from the prefix, KEYS[1] less the job id.
]]
--@include "common"
--@include "requeue"
--@include "parents"
--@include "groups_admin"

local job_key = KEYS[1]
local job_id = ARGV[1]
if redis.call("EXISTS", job_key) == 0 then
  return -1
end
if redis.call("ZREM", KEYS[3], job_id) == 0 then
  return -3
end

local cleared = {"finishedOn", "processedOn", ARGV[3]}
if ARGV[5] == "1" then
  cleared[#cleared + 1] = "atm"
end
if ARGV[6] == "1" then
  cleared[#cleared + 1] = "ats"
end
redis.call("HDEL", job_key, unpack(cleared))

local f = redis.call("HMGET", job_key, "priority", "gid")
local priority = tonumber(f[1]) or 0
if f[2] then
  group_place(group_keys(prefix_of(job_key, job_id)), job_id, f[2], priority,
    ARGV[2] == "RPUSH", tonumber(ARGV[7]))
  if not paused_or_maxed(KEYS[5], KEYS[6]) then
    add_base_marker(KEYS[7])
  end
else
  requeue_ready(KEYS[4], KEYS[8], KEYS[9], KEYS[7], paused_or_maxed(KEYS[5], KEYS[6]),
    priority, job_id, ARGV[2])
end

reattach_child(job_key, ARGV[4])

redis.call("XADD", KEYS[2], "MAXLEN", "~", max_events(KEYS[5]), "*",
  "event", "waiting", "jobId", job_id, "prev", ARGV[4])
return 1
