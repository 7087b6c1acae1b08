--[[
  moveJobsToWait: move up to `count` jobs of completed, failed or delayed back to `wait`
  (docs/protocol/scripts.md#script-moveJobsToWait): Queue.retry_jobs /
  Queue.promote_jobs.

  KEYS[1] the state key "P:Q:<state>"
  KEYS[2] wait
  KEYS[3] meta
  KEYS[4] active
  KEYS[5] marker
  KEYS[6] events

  ARGV[1] base key "P:Q:"
  ARGV[2] count (> 0)
  ARGV[3] the highest score taken (completed/failed: finishedOn ms; "+inf" for all)
  ARGV[4] state: completed, failed or delayed

  Returns: 1 `count` jobs were moved (more may remain; call again), else 0.

  Lowest scores first. Completed/failed jobs lose finishedOn, processedOn and returnvalue /
  failedReason, and become pending again in a live parent. Each job gets a `waiting` event
  (prev = the state). All are LPUSHed onto wait, priority ignored; the `delay` field of a
  delayed job is left as it is. Base marker unless paused or maxed.
]]
--@include "parents"

local base = ARGV[1]
local count = tonumber(ARGV[2])
local state = ARGV[4]
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], 0, ARGV[3], "LIMIT", 0, count)
if #ids == 0 then
  return 0
end

local max_len = max_events(KEYS[3])
local result_field = nil
if state == "failed" then
  result_field = "failedReason"
elseif state == "completed" then
  result_field = "returnvalue"
end
for _, id in ipairs(ids) do
  if result_field then
    local job_key = base .. id
    redis.call("HDEL", job_key, "finishedOn", "processedOn", result_field)
    reattach_child(job_key, state)
  end
  redis.call("XADD", KEYS[6], "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", id,
    "prev", state)
end
for i = 1, #ids, 5000 do
  local last = math.min(i + 4999, #ids)
  redis.call("ZREM", KEYS[1], unpack(ids, i, last))
  redis.call("LPUSH", KEYS[2], unpack(ids, i, last))
end
if not paused_or_maxed(KEYS[3], KEYS[4]) then
  add_base_marker(KEYS[5])
end
if #ids == count then
  return 1
end
return 0
