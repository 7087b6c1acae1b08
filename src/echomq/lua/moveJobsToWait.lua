--[[
  moveJobsToWait: move up to `count` jobs of completed, failed or delayed back to `wait`
  (docs/protocol/scripts.md#script-moveJobsToWait): Queue.retry_jobs /
  Queue.promote_jobs.

  KEYS[1] prefix "P:Q:": job keys are built from it (includes/job_keys.lua); a parent's keys
          (possibly in another queue) from the child's job reference
  KEYS[2] wait
  KEYS[3] meta
  KEYS[4] active
  KEYS[5] marker
  KEYS[6] events
  KEYS[7] completed
  KEYS[8] failed
  KEYS[9] delayed
  Of KEYS[7..9] only the state named by ARGV[3] is read.

  ARGV[1] count (> 0)
  ARGV[2] the highest score taken (completed/failed: finishedOn ms; "+inf" for all)
  ARGV[3] state: completed, failed or delayed

  Returns: 1 `count` jobs were moved (more may remain; call again), else 0.

  Lowest scores first. Completed/failed jobs lose finishedOn, processedOn and returnvalue /
  failedReason, and become pending again in a live parent. Each job gets a `waiting` event
  (prev = the state). All are LPUSHed onto wait, priority ignored; the `delay` field of a
  delayed job is left as it is. Base marker unless paused or maxed.
]]
--@include "parents"

local q = {
  prefix = KEYS[1], wait = KEYS[2], meta = KEYS[3], active = KEYS[4], marker = KEYS[5],
  events = KEYS[6], completed = KEYS[7], failed = KEYS[8], delayed = KEYS[9],
}
local count = tonumber(ARGV[1])
local state = ARGV[3]
local state_key = ({completed = q.completed, failed = q.failed, delayed = q.delayed})[state]
if not state_key then
  return redis.error_reply("moveJobsToWait: unknown state " .. tostring(state))
end
local ids = redis.call("ZRANGEBYSCORE", state_key, 0, ARGV[2], "LIMIT", 0, count)
if #ids == 0 then
  return 0
end

local max_len = max_events(q.meta)
local result_field = nil
if state == "failed" then
  result_field = "failedReason"
elseif state == "completed" then
  result_field = "returnvalue"
end
for _, id in ipairs(ids) do
  if result_field then
    local job_key = job_hash_key(q.prefix, id)
    redis.call("HDEL", job_key, "finishedOn", "processedOn", result_field)
    reattach_child(job_key, state)
  end
  redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", id,
    "prev", state)
end
for i = 1, #ids, 5000 do
  local last = math.min(i + 4999, #ids)
  redis.call("ZREM", state_key, unpack(ids, i, last))
  redis.call("LPUSH", q.wait, unpack(ids, i, last))
end
if not paused_or_maxed(q.meta, q.active) then
  add_base_marker(q.marker)
end
if #ids == count then
  return 1
end
return 0
