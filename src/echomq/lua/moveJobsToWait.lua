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
  ARGV[4] now (ms): when a grouped job becomes waiting

  Returns: 1 `count` jobs were moved (more may remain; call again), else 0.

  Lowest scores first. Completed/failed jobs lose finishedOn, processedOn and returnvalue /
  failedReason, and become pending again in a live parent. Each job gets a `waiting` event
  (prev = the state). All are LPUSHed onto wait, priority ignored; the `delay` field of a
  delayed job is left as it is. Base marker unless paused or maxed.

  Grouped jobs (docs/protocol/groups.md): a job whose hash has `gid` returns to its group
  (group_place, by its priority) instead of wait; with state delayed, groups:delayed is taken
  after delayed, in the same count (an id whose hash is gone is dropped from it).
]]
--@include "parents"
--@include "groups_admin"

local q = {
  prefix = KEYS[1], wait = KEYS[2], meta = KEYS[3], active = KEYS[4], marker = KEYS[5],
  events = KEYS[6], completed = KEYS[7], failed = KEYS[8], delayed = KEYS[9],
}
local count = tonumber(ARGV[1])
local state = ARGV[3]
local now = tonumber(ARGV[4])
local state_key = ({completed = q.completed, failed = q.failed, delayed = q.delayed})[state]
if not state_key then
  return redis.error_reply("moveJobsToWait: unknown state " .. tostring(state))
end
local g = group_keys(q.prefix)
local ids = redis.call("ZRANGEBYSCORE", state_key, 0, ARGV[2], "LIMIT", 0, count)
local grouped_delayed = {}
if state == "delayed" and #ids < count then
  grouped_delayed = redis.call("ZRANGEBYSCORE", g.delayed, 0, ARGV[2], "LIMIT", 0,
    count - #ids)
end
if #ids == 0 and #grouped_delayed == 0 then
  return 0
end

local max_len = max_events(q.meta)
local result_field = nil
if state == "failed" then
  result_field = "failedReason"
elseif state == "completed" then
  result_field = "returnvalue"
end
-- the ids that go to wait
local to_wait = {}

local function zrem_all(key, members)
  for i = 1, #members, 5000 do
    redis.call("ZREM", key, unpack(members, i, math.min(i + 4999, #members)))
  end
end

-- Move one job: to its group when it has one, else (later) onto wait; `waiting` event.
local function move(id, job_key)
  local f = redis.call("HMGET", job_key, "gid", "priority")
  if f[1] then
    group_place(g, id, f[1], tonumber(f[2]) or 0, false, now)
  else
    to_wait[#to_wait + 1] = id
  end
  redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", id,
    "prev", state)
end

for _, id in ipairs(ids) do
  local job_key = job_hash_key(q.prefix, id)
  if result_field then
    redis.call("HDEL", job_key, "finishedOn", "processedOn", result_field)
    reattach_child(job_key, state)
  end
  move(id, job_key)
end
zrem_all(state_key, ids)
if #grouped_delayed > 0 then
  zrem_all(g.delayed, grouped_delayed)
  for _, id in ipairs(grouped_delayed) do
    local job_key = job_hash_key(q.prefix, id)
    if redis.call("EXISTS", job_key) == 1 then
      move(id, job_key)
    end
  end
end
for i = 1, #to_wait, 5000 do
  redis.call("LPUSH", q.wait, unpack(to_wait, i, math.min(i + 4999, #to_wait)))
end
if not paused_or_maxed(q.meta, q.active) then
  add_base_marker(q.marker)
end
if #ids + #grouped_delayed == count then
  return 1
end
return 0
