--[[
  getState: name the state that holds a job (docs/protocol/scripts.md#script-getState,
  getStateV2 order).

  KEYS[1] completed
  KEYS[2] failed
  KEYS[3] delayed
  KEYS[4] prioritized
  KEYS[5] active
  KEYS[6] wait
  KEYS[7] paused (legacy v5 list; read only)
  KEYS[8] waiting-children

  ARGV[1] job id

  Returns: "completed", "failed", "delayed", "prioritized", "active", "waiting" (for `wait`
  and the legacy `paused` list), "waiting-children", or "unknown" when no state holds the id.
  Errors: none. Needs Redis >= 6.0.6 (LPOS).

  A grouped job (docs/protocol/groups.md) is looked for only when none of these holds the id
  and its hash has `gid`: "waiting" in groups:waiting, "active" in groups:active, "delayed" in
  groups:delayed (keys built from the prefix, KEYS[1] less its suffix "completed").
]]
--@include "groups_admin"

local id = ARGV[1]
-- KEYS[i] is searched with searched[i][1]; a hit names the state searched[i][2].
local searched = {
  {"ZSCORE", "completed"}, {"ZSCORE", "failed"}, {"ZSCORE", "delayed"}, {"ZSCORE", "prioritized"},
  {"LPOS", "active"}, {"LPOS", "waiting"}, {"LPOS", "waiting"}, {"ZSCORE", "waiting-children"},
}
for i, search in ipairs(searched) do
  if redis.call(search[1], KEYS[i], id) then
    return search[2]
  end
end
local prefix = prefix_of(KEYS[1], "completed")
if job_group(job_hash_key(prefix, id)) then
  local g = group_keys(prefix)
  if redis.call("ZSCORE", g.waiting, id) then
    return "waiting"
  elseif redis.call("LPOS", g.active, id) then
    return "active"
  elseif redis.call("ZSCORE", g.delayed, id) then
    return "delayed"
  end
end
return "unknown"
