--[[
  pause: pause a queue, or resume it (docs/protocol/scripts.md#script-pause).

  KEYS[1] wait
  KEYS[2] paused (legacy v5 list: never written, drained into `wait` on resume)
  KEYS[3] meta
  KEYS[4] prioritized
  KEYS[5] events
  KEYS[6] delayed
  KEYS[7] marker

  ARGV[1] "paused" to pause, "resumed" to resume (also the event name)
  ARGV[2] "1" to emit the event, "0" not to

  Returns: how many entries of the legacy `paused` list are still to move (always 0 for a
  pause). The caller resumes again with ARGV[2] "0" until the reply is 0.
  Errors: none.

  Pause sets meta `paused` and deletes the marker, so idle workers stop; jobs stay where they
  are. Resume deletes the flag, moves up to 7000 legacy entries onto the served end of `wait`
  (or renames the list when `wait` does not exist), then writes the base marker when jobs are
  ready, else the delay marker.
]]
--@include "common"

local batch = 7000
local remaining = 0
if ARGV[1] == "paused" then
  redis.call("HSET", KEYS[3], "paused", 1)
  redis.call("DEL", KEYS[7])
else
  redis.call("HDEL", KEYS[3], "paused")
  if redis.call("EXISTS", KEYS[2]) == 1 then
    if redis.call("EXISTS", KEYS[1]) == 0 then
      redis.call("RENAME", KEYS[2], KEYS[1])
    else
      local ids = redis.call("LRANGE", KEYS[2], 0, batch - 1)
      redis.call("RPUSH", KEYS[1], unpack(ids))
      redis.call("LTRIM", KEYS[2], batch, -1)
      remaining = redis.call("LLEN", KEYS[2])
    end
  end
  if redis.call("LLEN", KEYS[1]) + redis.call("ZCARD", KEYS[4]) > 0 then
    add_base_marker(KEYS[7])
  else
    refresh_delay_marker(KEYS[7], KEYS[6])
  end
end
if ARGV[2] ~= "0" then
  redis.call("XADD", KEYS[5], "*", "event", ARGV[1])
end
return remaining
