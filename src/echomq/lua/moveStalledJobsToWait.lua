--[[
  moveStalledJobsToWait: the stalled check, at most once per interval fleet-wide
  (docs/protocol/scripts.md#script-moveStalledJobsToWait).

  KEYS[1] prefix "P:Q:": job keys, their locks and the scheduler hashes repeat:<id> are built
          from it (includes/job_keys.lua)
  KEYS[2] stalled
  KEYS[3] wait
  KEYS[4] active
  KEYS[5] stalled-check
  KEYS[6] meta
  KEYS[7] marker
  KEYS[8] events
  KEYS[9] repeat

  ARGV[1] max stalled count
  ARGV[2] now (ms)
  ARGV[3] stalled interval (ms)
  ARGV[4] failed reason (written to `defa` past the max count; BullMQ's text)

  Returns: {recovered, dangling}, two arrays of job ids: those moved back to wait, and those
  removed from active because their job hash does not exist. A job is recovered when it was a
  suspect at the previous check (in `stalled`) and its lock has expired. One that stalled more
  than the max count gets `defa`, so the worker that fetches it next fails it (deferred
  failure), unless it is the live iteration of a job scheduler. A suspect with neither a lock
  nor a hash is dangling: it is only removed from active (no event, and no write to its job
  key, which would create a partial hash). Then every active job becomes a suspect for the
  next check. echomq extension (docs/protocol/worker-rules.md#isolation): with a max count of
  at least 1, a job past it that was not isolated yet is isolated instead (`iso` = 1): it runs
  alone from then on, and only a stall of an isolated job, which ran alone, gets `defa`. Both arrays are empty when another check ran within the interval.
  Grouped jobs (docs/protocol/groups.md#groups-rules) get the same treatment with
  `groups:stalled` and `groups:active`; a recovered one returns to its group.
]]
--@include "common"
--@include "job_keys"
--@include "groups"

local q = {
  prefix = KEYS[1], stalled = KEYS[2], wait = KEYS[3], active = KEYS[4], stalled_check = KEYS[5],
  meta = KEYS[6], marker = KEYS[7], events = KEYS[8], ["repeat"] = KEYS[9],
}
if redis.call("EXISTS", q.stalled_check) == 1 then
  return {{}, {}}
end
redis.call("SET", q.stalled_check, ARGV[2], "PX", ARGV[3])
local max_stalled = tonumber(ARGV[1])
local isolate = max_stalled >= 1
local max_len = max_events(q.meta)
redis.call("XTRIM", q.events, "MAXLEN", "~", max_len)

-- Back to the front of wait (a grouped job: of its group), with the stalled counter, `defa`
-- past the limit, and events.
local function recover(job_key, id, blocked, g, gid)
  local stalled = redis.call("HINCRBY", job_key, "stc", 1)
  local rjk = redis.call("HGET", job_key, "rjk")
  local scheduled = rjk and (redis.call("EXISTS", scheduler_hash_key(q.prefix, rjk)) == 1
    or redis.call("ZSCORE", q["repeat"], rjk) ~= false)
  if stalled > max_stalled and not scheduled then
    if isolate and redis.call("HSETNX", job_key, "iso", "1") == 1 then
      -- it stalled beside other jobs: run it alone before blaming it
    else
      redis.call("HSET", job_key, "defa", ARGV[4])
    end
  end
  if gid then
    group_place(g, id, gid, tonumber(redis.call("HGET", job_key, "priority")) or 0, true,
      tonumber(ARGV[2]))
  else
    redis.call("RPUSH", q.wait, id)
  end
  if not blocked then
    add_base_marker(q.marker)
  end
  redis.call("XADD", q.events, "*", "event", "waiting", "jobId", id, "prev", "active")
  redis.call("XADD", q.events, "*", "event", "stalled", "jobId", id)
end

local recovered = {}
local dangling = {}
local suspects = redis.call("SMEMBERS", q.stalled)
if #suspects > 0 then
  redis.call("DEL", q.stalled)
  local blocked = paused_or_maxed(q.meta, q.active)
  for _, id in ipairs(suspects) do
    if string.sub(id, 1, 2) == "0:" then
      redis.call("LREM", q.active, 1, id)
    else
      local job_key = job_hash_key(q.prefix, id)
      if redis.call("EXISTS", job_part_key(job_key, "lock")) == 0
        and redis.call("LREM", q.active, 1, id) > 0 then
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

-- Every job of `active_key` becomes a suspect (in `stalled_key`) for the next check.
local function suspect_all(active_key, stalled_key)
  local active = redis.call("LRANGE", active_key, 0, -1)
  for i = 1, #active, 7000 do
    redis.call("SADD", stalled_key, unpack(active, i, math.min(i + 6999, #active)))
  end
end

suspect_all(q.active, q.stalled)

local g = group_keys(q.prefix)
if redis.call("EXISTS", g.state) == 1 then
  local grouped = redis.call("SMEMBERS", g.stalled)
  if #grouped > 0 then
    redis.call("DEL", g.stalled)
    local blocked = paused_or_maxed(q.meta, q.active)
    for _, id in ipairs(grouped) do
      local job_key = job_hash_key(q.prefix, id)
      if redis.call("EXISTS", job_part_key(job_key, "lock")) == 0
        and redis.call("LREM", g.active, 1, id) > 0 then
        local gid = redis.call("HGET", job_key, "gid")
        if not gid then
          dangling[#dangling + 1] = id
        else
          group_release(g, gid, id, tonumber(ARGV[2]))
          recover(job_key, id, blocked, g, gid)
          recovered[#recovered + 1] = id
        end
      end
    end
  end
  suspect_all(g.active, g.stalled)
end
return {recovered, dangling}
