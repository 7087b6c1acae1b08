-- Group settings (docs/protocol/groups.md#groups-admin): bringing back into
-- the rotation a group that a changed setting lets run again. `g` is group_keys(prefix).
--@include "common"
--@include "job_keys"
--@include "groups"

-- A group that has waiting jobs and is out of the rotation joins it when it may run now: not
-- paused, below its concurrency, and its rate window not full. A group in `g.limited` whose
-- window (the starts of the last window ms in `groups:limit:<gid>`, on the workers' clock:
-- `now` ms) now holds fewer starts than its raised or removed rate limit leaves `g.limited`
-- first. True when the group joined the rotation with this call.
local function group_recheck(g, gid, now)
  if redis.call("EXISTS", group_wait_key(g.prefix, gid)) == 0 then
    return false
  end
  if redis.call("ZSCORE", g.limited, gid) then
    local _, max_jobs, window = group_limits(g, gid)
    if max_jobs and window then
      local starts = redis.call("ZCOUNT", group_limit_key(g.prefix, gid),
        string.format("(%s", score_str(now - window)), "+inf")
      if starts >= max_jobs then
        return false
      end
    end
    redis.call("ZREM", g.limited, gid)
  end
  local state = group_state(g, gid)
  if group_in_rotation(state) or not group_may_run(g, gid) then
    return false
  end
  group_join(g, gid, state)
  return true
end
