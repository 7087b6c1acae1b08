--[[
  addJob: store a new job and put it in `wait`, `prioritized` or `delayed` (CORE.md 7.1-7.3).

  KEYS[1] wait
  KEYS[2] meta
  KEYS[3] id
  KEYS[4] delayed
  KEYS[5] prioritized
  KEYS[6] active
  KEYS[7] events
  KEYS[8] marker
  KEYS[9] pc

  ARGV[1]  base key "P:Q:"
  ARGV[2]  custom job id, or ""
  ARGV[3]  name
  ARGV[4]  timestamp (ms)
  ARGV[5]  data (JSON text)
  ARGV[6]  opts (JSON text, compressed option names)
  ARGV[7]  delay (ms, >= 0)
  ARGV[8]  priority (0 .. 2^21-1)
  ARGV[9]  "1" for lifo, else "0"
  ARGV[10] parent key "P':Q':<id>", or ""
  ARGV[11] parent JSON {"id":..,"queueKey":..}, or ""

  Returns: the job id (string). A custom id whose hash exists returns that id after a
  `duplicated` event, storing nothing.
  Errors: -5 the parent hash does not exist.

  Which list: delay > 0 -> delayed (even with a priority); else priority > 0 -> prioritized;
  else wait (LPUSH, or RPUSH for lifo). `id` is INCRed on every call, as Node does.
]]
--@include "common"

local base = ARGV[1]
local parent_key = ARGV[10]
if parent_key ~= "" and redis.call("EXISTS", parent_key) == 0 then
  return -5
end

local counter = redis.call("INCR", KEYS[3])
local max_len = max_events(KEYS[2])
local job_id = ARGV[2]
if job_id == "" then
  job_id = int_str(counter)
end
local job_key = base .. job_id

if ARGV[2] ~= "" and redis.call("EXISTS", job_key) == 1 then
  redis.call("XADD", KEYS[7], "MAXLEN", "~", max_len, "*", "event", "duplicated", "jobId", job_id)
  return job_id
end

local timestamp = tonumber(ARGV[4])
local delay = tonumber(ARGV[7])
local priority = tonumber(ARGV[8])

if parent_key ~= "" then
  redis.call("HSET", job_key, "name", ARGV[3], "data", ARGV[5], "opts", ARGV[6],
    "timestamp", ARGV[4], "delay", ARGV[7], "priority", ARGV[8],
    "parentKey", parent_key, "parent", ARGV[11])
else
  redis.call("HSET", job_key, "name", ARGV[3], "data", ARGV[5], "opts", ARGV[6],
    "timestamp", ARGV[4], "delay", ARGV[7], "priority", ARGV[8])
end
redis.call("XADD", KEYS[7], "*", "event", "added", "jobId", job_id, "name", ARGV[3])

if delay > 0 then
  local due = timestamp + delay
  redis.call("ZADD", KEYS[4], score_str(delayed_score(KEYS[4], due)), job_id)
  redis.call("XADD", KEYS[7], "MAXLEN", "~", max_len, "*", "event", "delayed",
    "jobId", job_id, "delay", int_str(due))
  refresh_delay_marker(KEYS[8], KEYS[4])
else
  if priority > 0 then
    add_prioritized(KEYS[5], KEYS[9], priority, job_id)
  elseif ARGV[9] == "1" then
    redis.call("RPUSH", KEYS[1], job_id)
  else
    redis.call("LPUSH", KEYS[1], job_id)
  end
  if not paused_or_maxed(KEYS[2], KEYS[6]) then
    add_base_marker(KEYS[8])
  end
  redis.call("XADD", KEYS[7], "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", job_id)
end

if parent_key ~= "" then
  redis.call("SADD", parent_key .. ":dependencies", job_key)
end
return job_id
