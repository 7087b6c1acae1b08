-- Shared helpers: number formatting, queue metadata, markers, scores and event trimming.
-- Numbers are formatted explicitly so every value written is an integer string, whatever
-- the Lua number formatting of the server (Redis Lua 5.1, or Lua 5.4 elsewhere).

local function int_str(n)
  return string.format("%d", n)
end

local function score_str(n)
  return string.format("%.0f", n)
end

-- The approximate MAXLEN for the events stream; writes the default 10000 when absent.
local function max_events(meta_key)
  local n = redis.call("HGET", meta_key, "opts.maxLenEvents")
  if not n then
    redis.call("HSET", meta_key, "opts.maxLenEvents", 10000)
    return 10000
  end
  return tonumber(n)
end

-- True when the queue is paused, or global concurrency is set and reached.
local function paused_or_maxed(meta_key, active_key)
  local meta = redis.call("HMGET", meta_key, "paused", "concurrency")
  if meta[1] then
    return true
  end
  if meta[2] then
    return redis.call("LLEN", active_key) >= tonumber(meta[2])
  end
  return false
end

local function add_base_marker(marker_key)
  redis.call("ZADD", marker_key, 0, "0")
end

-- Write the delay marker "1" at the due time of the earliest delayed job (if any).
local function refresh_delay_marker(marker_key, delayed_key)
  local first = redis.call("ZRANGE", delayed_key, 0, 0, "WITHSCORES")
  if first[1] then
    redis.call("ZADD", marker_key, tonumber(first[2]) / 4096, "1")
  end
end

-- Score for a job due at `due` ms: due*4096 + a sequence number for jobs due in the same ms.
local function delayed_score(delayed_key, due)
  local low = due * 4096
  local high = low + 4095
  local top = redis.call("ZREVRANGEBYSCORE", delayed_key, score_str(high), score_str(low),
    "WITHSCORES", "LIMIT", 0, 1)
  if top[1] then
    local s = tonumber(top[2]) + 1
    if s > high then
      s = high
    end
    return s
  end
  return low
end

-- ZADD a job to the prioritized set: priority*2^32 + (INCR pc mod 2^32).
local function add_prioritized(prioritized_key, pc_key, priority, job_id)
  local counter = redis.call("INCR", pc_key) % 4294967296
  redis.call("ZADD", prioritized_key, score_str(priority * 4294967296 + counter), job_id)
end
