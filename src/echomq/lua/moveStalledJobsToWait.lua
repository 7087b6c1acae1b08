--[[
  moveStalledJobsToWait: the stalled check, at most once per interval fleet-wide
  (docs/protocol/scripts.md#script-moveStalledJobsToWait).

  KEYS[1] stalled
  KEYS[2] wait
  KEYS[3] active
  KEYS[4] stalled-check
  KEYS[5] meta
  KEYS[6] marker
  KEYS[7] events
  KEYS[8] repeat

  ARGV[1] base key "P:Q:"
  ARGV[2] max stalled count
  ARGV[3] now (ms)
  ARGV[4] stalled interval (ms)

  Returns: {recovered, dangling}, two arrays of job ids: those moved back to wait, and those
  removed from active because their job hash does not exist. A job is recovered when it was a
  suspect at the previous check (in `stalled`) and its lock has expired. One that stalled more
  than the max count gets `defa`, so the worker that fetches it next fails it (deferred
  failure), unless it is the live iteration of a job scheduler. A suspect with neither a lock
  nor a hash is dangling: it is only removed from active (no event, and no write to its job
  key, which would create a partial hash). Then every active job becomes a suspect for the
  next check. Both arrays are empty when another check ran within the interval.
]]
--@include "common"

if redis.call("EXISTS", KEYS[4]) == 1 then
  return {{}, {}}
end
redis.call("SET", KEYS[4], ARGV[3], "PX", ARGV[4])
local base = ARGV[1]
local max_stalled = tonumber(ARGV[2])
local max_len = max_events(KEYS[5])
redis.call("XTRIM", KEYS[7], "MAXLEN", "~", max_len)

-- Back to the front of wait, with the stalled counter, `defa` past the limit, and events.
local function recover(job_key, id, blocked)
  local stalled = redis.call("HINCRBY", job_key, "stc", 1)
  local rjk = redis.call("HGET", job_key, "rjk")
  local scheduled = rjk and (redis.call("EXISTS", base .. "repeat:" .. rjk) == 1
    or redis.call("ZSCORE", KEYS[8], rjk) ~= false)
  if stalled > max_stalled and not scheduled then
    redis.call("HSET", job_key, "defa", "job stalled more than allowable limit")
  end
  redis.call("RPUSH", KEYS[2], id)
  if not blocked then
    add_base_marker(KEYS[6])
  end
  redis.call("XADD", KEYS[7], "*", "event", "waiting", "jobId", id, "prev", "active")
  redis.call("XADD", KEYS[7], "*", "event", "stalled", "jobId", id)
end

local recovered = {}
local dangling = {}
local suspects = redis.call("SMEMBERS", KEYS[1])
if #suspects > 0 then
  redis.call("DEL", KEYS[1])
  local blocked = paused_or_maxed(KEYS[5], KEYS[3])
  for _, id in ipairs(suspects) do
    if string.sub(id, 1, 2) == "0:" then
      redis.call("LREM", KEYS[3], 1, id)
    else
      local job_key = base .. id
      if redis.call("EXISTS", job_key .. ":lock") == 0
        and redis.call("LREM", KEYS[3], 1, id) > 0 then
        if redis.call("EXISTS", job_key) == 0 then
          dangling[#dangling + 1] = id
        else
          recover(job_key, id, blocked)
          recovered[#recovered + 1] = id
        end
      end
    end
  end
end

local active = redis.call("LRANGE", KEYS[3], 0, -1)
for i = 1, #active, 7000 do
  redis.call("SADD", KEYS[1], unpack(active, i, math.min(i + 6999, #active)))
end
return {recovered, dangling}
