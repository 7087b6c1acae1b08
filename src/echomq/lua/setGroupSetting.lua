--[[
  setGroupSetting: set or remove a group setting in `groups:state` (a concurrency, a rate limit,
  a pause), then bring back into the rotation the groups it lets run again
  (docs/protocol/scripts.md#script-setGroupSetting, docs/protocol/groups.md#groups-admin).

  KEYS[1] prefix "P:Q:": the group keys are built from it (includes/job_keys.lua, group_keys)
  KEYS[2] marker

  ARGV[1] setting: "c" (concurrency), "r" (rate limit) or "p" (paused); "" sets nothing (a
          later call of a scan over every group)
  ARGV[2] group id, or "" for the default of every group (never for "p")
  ARGV[3] value ("<n>" for "c", "<max>:<window ms>" for "r", "1" for "p"), or "" to remove
  ARGV[4] ZSCAN cursor over `groups` ("0" to start)
  ARGV[5] ZSCAN COUNT (> 0)
  ARGV[6] now (ms): a rate window's starts are those of the last window ms before it

  Returns: {cursor, changed}: cursor "0" when done, else the ZSCAN cursor to call again with
  (ARGV[1] ""); changed 1 when a removed setting existed or a set one differed, else 0.
  Errors: none.

  Re-checking: a group's own setting (ARGV[2] a group id) re-checks that group alone. A
  default that got looser (removed, or a concurrency or rate max raised from a set value)
  re-checks the groups of one ZSCAN step of `groups` per call; a stricter one re-checks
  nothing (groups meet it at their next fetch). The base marker is written when a group joined.
]]
--@include "common"
--@include "job_keys"
--@include "groups_admin"

local g = group_keys(KEYS[1])
local marker = KEYS[2]
local setting, gid, value = ARGV[1], ARGV[2], ARGV[3]
local now = tonumber(ARGV[6])

-- The max of a stored rate "<max>:<window ms>" (nil when unreadable).
local function rate_max(rate)
  return tonumber(string.match(rate, "^(%d+):"))
end

-- Whether the default `setting` went from `old` (nil: none) to `new` ("": removed) looser.
local function loosened(old, new)
  if not old then
    return false
  end
  if new == "" then
    return true
  end
  if setting == "r" then
    local before, after = rate_max(old), rate_max(new)
    return before ~= nil and after ~= nil and after > before
  end
  local before, after = tonumber(old), tonumber(new)
  return before ~= nil and after ~= nil and after > before
end

local changed = 0
if setting ~= "" then
  local field = setting
  if gid ~= "" then
    field = string.format("%s:%s", setting, gid)
  end
  local old = redis.call("HGET", g.state, field)
  if value == "" then
    changed = redis.call("HDEL", g.state, field)
  else
    redis.call("HSET", g.state, field, value)
    if old ~= value then
      changed = 1
    end
  end
  -- "o" counts the groups' own settings: while it is 0, a fetch reads the defaults alone
  if gid ~= "" and value == "" and changed == 1 then
    redis.call("HINCRBY", g.state, "o", -1)
  elseif gid ~= "" and value ~= "" and not old then
    redis.call("HINCRBY", g.state, "o", 1)
  end
  if gid ~= "" then
    if not (setting == "p" and value ~= "") and group_recheck(g, gid, now) then
      add_base_marker(marker)
    end
    return {"0", changed}
  end
  if not loosened(old, value) then
    return {"0", changed}
  end
end

local step = redis.call("ZSCAN", g.index, ARGV[4], "COUNT", ARGV[5])
local joined = false
local members = step[2]
for i = 1, #members, 2 do
  if group_recheck(g, members[i], now) then
    joined = true
  end
end
if joined then
  add_base_marker(marker)
end
return {step[1], changed}
