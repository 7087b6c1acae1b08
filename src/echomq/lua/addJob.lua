--[[
  addJob: store a new job and put it in `wait`, `prioritized` or `delayed` (CORE.md 7.1-7.3).

  KEYS[1] base key "P:Q:"; every queue key is derived from it, so a hash tag in the
          prefix or the name keeps them in one Cluster slot

  ARGV[1]  custom job id, or ""
  ARGV[2]  name
  ARGV[3]  timestamp (ms)
  ARGV[4]  data (JSON text)
  ARGV[5]  opts (JSON text, compressed option names)
  ARGV[6]  delay (ms, >= 0)
  ARGV[7]  priority (0 .. 2^21-1)
  ARGV[8]  "1" for lifo, else "0"
  ARGV[9]  parent key "P':Q':<id>", or ""
  ARGV[10] parent JSON {"id":..,"queueKey":..}, or ""

  Returns: the job id (string). A custom id whose hash exists returns that id after a
  `duplicated` event, storing nothing.
  Errors: -5 the parent hash does not exist.

  Which list: delay > 0 -> delayed (even with a priority); else priority > 0 -> prioritized;
  else wait (LPUSH, or RPUSH for lifo). `id` is INCRed on every call, as Node does.
]]
--@include "common"

local base = KEYS[1]
local k_wait, k_meta, k_id = base .. "wait", base .. "meta", base .. "id"
local k_delayed, k_prioritized, k_active = base .. "delayed", base .. "prioritized", base .. "active"
local k_events, k_marker, k_pc = base .. "events", base .. "marker", base .. "pc"
local parent_key = ARGV[9]
if parent_key ~= "" and redis.call("EXISTS", parent_key) == 0 then
  return -5
end

local counter = redis.call("INCR", k_id)
local max_len = max_events(k_meta)
local job_id = ARGV[1]
if job_id == "" then
  job_id = int_str(counter)
end
local job_key = base .. job_id

if ARGV[1] ~= "" and redis.call("EXISTS", job_key) == 1 then
  redis.call("XADD", k_events, "MAXLEN", "~", max_len, "*", "event", "duplicated", "jobId", job_id)
  return job_id
end

local timestamp = tonumber(ARGV[3])
local delay = tonumber(ARGV[6])
local priority = tonumber(ARGV[7])

if parent_key ~= "" then
  redis.call("HSET", job_key, "name", ARGV[2], "data", ARGV[4], "opts", ARGV[5],
    "timestamp", ARGV[3], "delay", ARGV[6], "priority", ARGV[7],
    "parentKey", parent_key, "parent", ARGV[10])
else
  redis.call("HSET", job_key, "name", ARGV[2], "data", ARGV[4], "opts", ARGV[5],
    "timestamp", ARGV[3], "delay", ARGV[6], "priority", ARGV[7])
end
redis.call("XADD", k_events, "*", "event", "added", "jobId", job_id, "name", ARGV[2])

if delay > 0 then
  local due = timestamp + delay
  redis.call("ZADD", k_delayed, score_str(delayed_score(k_delayed, due)), job_id)
  redis.call("XADD", k_events, "MAXLEN", "~", max_len, "*", "event", "delayed",
    "jobId", job_id, "delay", int_str(due))
  refresh_delay_marker(k_marker, k_delayed)
else
  if priority > 0 then
    add_prioritized(k_prioritized, k_pc, priority, job_id)
  elseif ARGV[8] == "1" then
    redis.call("RPUSH", k_wait, job_id)
  else
    redis.call("LPUSH", k_wait, job_id)
  end
  if not paused_or_maxed(k_meta, k_active) then
    add_base_marker(k_marker)
  end
  redis.call("XADD", k_events, "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", job_id)
end

if parent_key ~= "" then
  redis.call("SADD", parent_key .. ":dependencies", job_key)
end
return job_id
