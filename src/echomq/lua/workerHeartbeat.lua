--[[
  workerHeartbeat: register, refresh or remove one worker in its queue's worker registry, which
  is echomq's own (docs/protocol/scripts.md#script-workerHeartbeat,
  docs/protocol/workers.md#workers-keys). BullMQ never reads or writes these keys.

  KEYS[1] workers: the index, a ZSET worker id -> when its entry expires (ms)
  KEYS[2] worker entry "P:Q:workers:<id>": a STRING holding the worker's JSON description

  ARGV[1] worker id
  ARGV[2] entry: the worker's JSON description, or "" to remove the worker
  ARGV[3] time to live (ms, > 0)
  ARGV[4] now (ms)

  Returns: how many workers the index lists afterwards.
  Errors: none.
]]
local index, entry = KEYS[1], KEYS[2]
local id, info = ARGV[1], ARGV[2]
local ttl, now = tonumber(ARGV[3]), tonumber(ARGV[4])

-- Workers that stopped beating (killed, cut off) leave the index here, at the latest at the next
-- heartbeat of any worker of the queue; readers skip them meanwhile.
redis.call("ZREMRANGEBYSCORE", index, "-inf", now)
if info == "" then
  redis.call("ZREM", index, id)
  redis.call("DEL", entry)
else
  redis.call("SET", entry, info, "PX", ttl)
  redis.call("ZADD", index, now + ttl, id)
end
-- The index lives as long as its longest-lived entry, so a queue whose workers are all gone
-- keeps no registry key.
local last = redis.call("ZRANGE", index, -1, -1, "WITHSCORES")
if #last == 0 then
  return 0
end
redis.call("PEXPIRE", index, math.max(math.floor(tonumber(last[2]) - now), 1))
return redis.call("ZCARD", index)
