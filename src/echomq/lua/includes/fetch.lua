-- Taking jobs for a worker: promotion of due delayed jobs, rate limit, global concurrency,
-- and "prepare for processing" (lock, `active` event, processedOn, ats). Needs "common",
-- "job_keys" and "groups"; `k` holds the queue's declared keys (prefix, wait, active,
-- prioritized, pc, delayed, events, marker, meta, limiter) and `k.g`, its group keys, with
-- `k.grouped` true when the queue has ever had a grouped job (else no group key is read).
--
-- Dangling ids (an id in wait, prioritized or delayed whose job hash does not exist) are
-- dropped from their structure instead of being moved on: writing the lock, processedOn or
-- the delay would create a partial hash, and a worker would then run a job that has no data.
-- Every one dropped during the script is appended to `dangling_jobs` as {id, structure}, so
-- the caller can return them and the client can report each one.

local dangling_jobs = {}

local function drop_dangling(id, structure)
  dangling_jobs[#dangling_jobs + 1] = id
  dangling_jobs[#dangling_jobs + 1] = structure
end

-- Move delayed jobs that are due (score <= (now+1)*4096-1) to wait / prioritized.
local function promote_due_delayed(k, now, blocked)
  local ids = redis.call("ZRANGEBYSCORE", k.delayed, 0, score_str((now + 1) * 4096 - 1),
    "LIMIT", 0, 1000)
  if #ids == 0 then
    return
  end
  redis.call("ZREM", k.delayed, unpack(ids))
  local promoted = 0
  for _, id in ipairs(ids) do
    local job_key = job_hash_key(k.prefix, id)
    if redis.call("EXISTS", job_key) == 0 then
      drop_dangling(id, "delayed")
    else
      promoted = promoted + 1
      local priority = tonumber(redis.call("HGET", job_key, "priority")) or 0
      if priority == 0 then
        redis.call("LPUSH", k.wait, id)
      else
        add_prioritized(k.prioritized, k.pc, priority, id)
      end
      redis.call("XADD", k.events, "*", "event", "waiting", "jobId", id, "prev", "delayed")
      redis.call("HSET", job_key, "delay", 0)
    end
  end
  if promoted > 0 and not blocked then
    add_base_marker(k.marker)
  end
end

-- The grouped counterpart: due grouped delayed jobs, and groups whose rate window ended.
local function promote_due_grouped(k, now, blocked)
  local moved = group_reopen(k.g, now)
  moved = moved + group_promote_due(k.g, k.events, now, function(id)
    drop_dangling(id, "delayed")
  end)
  if moved > 0 and not blocked then
    add_base_marker(k.marker)
  end
end

-- Jobs being processed, grouped ones included (for the global concurrency).
local function active_count(k)
  local n = redis.call("LLEN", k.active)
  if k.grouped then
    n = n + redis.call("LLEN", k.g.active) + #k.g.taken
  end
  return n
end

-- Pop the next job id into active: the tail of wait first, then the lowest score of
-- prioritized. Returns the id, the structure it came from (nil when both are empty) and, from
-- prioritized, its score.
local function pop_next_id(k_wait, k_active, k_prioritized, k_pc)
  local id = redis.call("RPOPLPUSH", k_wait, k_active)
  if id and string.sub(id, 1, 2) == "0:" then
    -- a pre-v5 delay marker left in the list
    redis.call("LREM", k_active, 1, id)
    id = redis.call("RPOPLPUSH", k_wait, k_active)
  end
  if id then
    return id, "wait"
  end
  local top = redis.call("ZPOPMIN", k_prioritized)
  if top[1] then
    redis.call("LPUSH", k_active, top[1])
    return top[1], "prioritized", top[2]
  end
  redis.call("DEL", k_pc)
  return nil
end

-- The next job id: with groups in the rotation, the rotation's next member that has one (a
-- group, or "" for the ungrouped jobs); else the ungrouped jobs alone. Returns the id, its
-- structure ("wait", "prioritized" or "group"; nil when nothing may run), its score, and the
-- group of a grouped job (it is then in g.active).
local function pop_next(k, now)
  -- the next member moves from the tail to the head, the back of the line
  local gid = k.grouped and redis.call("RPOPLPUSH", k.g.ready, k.g.ready)
  if not gid then -- no group in the rotation
    return pop_next_id(k.wait, k.active, k.prioritized, k.pc)
  end
  -- The first member met usually has a job; when it has none, the rest of the rotation is met
  -- once at most (LLEN: no member joins during a fetch), so the loop ends.
  local n = nil
  local i = 0
  while true do
    if i > 0 then
      gid = redis.call("RPOPLPUSH", k.g.ready, k.g.ready)
      if not gid then
        return nil
      end
    end
    if gid == "" then
      if redis.call("LLEN", k.g.ready) == 1 then -- no group left in the rotation
        redis.call("LPOP", k.g.ready)
      end
      if redis.call("EXISTS", k.wait, k.prioritized) > 0 then
        local id, source, score = pop_next_id(k.wait, k.active, k.prioritized, k.pc)
        if id then
          return id, source, score
        end
      end
    else
      local id, score = group_take(k.g, gid, now)
      if id then
        return id, "group", score, gid
      end
    end
    n = n or redis.call("LLEN", k.g.ready)
    i = i + 1
    if i > n then
      return nil
    end
  end
end

-- The rate-limit TTL when the window is full, else 0 (an expired window is deleted).
local function rate_limit_ttl(k_limiter, max_jobs)
  if not max_jobs then
    return 0
  end
  local count = tonumber(redis.call("GET", k_limiter)) or 0
  if count >= max_jobs then
    local ttl = redis.call("PTTL", k_limiter)
    if ttl == 0 then
      redis.call("DEL", k_limiter)
    elseif ttl > 0 then
      return ttl
    end
  end
  return 0
end

-- Prepare one taken job for processing: limiter count (not for a job that will only be
-- failed for its `defa`), lock, `active` event, processedOn / pb, ats. Returns its HGETALL.
local function start_job(k, job_key, id, token, now, w, max_jobs, duration)
  if max_jobs and redis.call("HEXISTS", job_key, "defa") == 0 then
    if redis.call("INCR", k.limiter) == 1 then
      redis.call("PEXPIRE", k.limiter, math.floor(math.abs(duration or 0)))
    end
  end
  redis.call("SET", job_part_key(job_key, "lock"), token, "PX", w.lock_ms)
  redis.call("XADD", k.events, "*", "event", "active", "jobId", id, "prev", "waiting")
  if w.name ~= "" then
    redis.call("HSET", job_key, "processedOn", now, "pb", w.name)
  else
    redis.call("HSET", job_key, "processedOn", now)
  end
  redis.call("HINCRBY", job_key, "ats", 1)
  return redis.call("HGETALL", job_key)
end

-- Most isolated jobs one fetch sets aside before it stops looking further.
local SET_ASIDE_MAX = 100

-- Whether a job is isolated (`iso`, set by the stalled check when it stalled past the max
-- stalled count beside other jobs) and will run: it may be what killed its workers, so it
-- runs alone. One carrying `defa` is only failed by its taker, so it runs nothing.
local function isolated(job_key)
  local f = redis.call("HMGET", job_key, "iso", "defa")
  return f[1] ~= false and f[2] == false
end

-- Put the jobs set aside back where they were taken from, in their order (the first taken
-- served next again).
local function put_back(k, aside, now)
  for j = #aside, 1, -1 do
    local entry = aside[j]
    if entry[2] == "wait" then
      redis.call("RPUSH", k.wait, entry[1])
    elseif entry[2] == "group" then
      group_put_back(k.g, entry[4], entry[1], entry[3], now)
    else
      redis.call("ZADD", k.prioritized, entry[3], entry[1])
    end
  end
end

-- Take up to `count` jobs. `w` holds the worker's parameters:
-- token_prefix, token_start, lock_ms, limiter_max, limiter_duration, name, busy (the worker
-- holds other jobs, or has another call in flight that may take some).
-- Returns {flat {id, token, hash, id, token, hash, ...}, rate_limit_ttl, next_delayed_due,
-- dangling, set_aside}, where dangling is `dangling_jobs` (flat {id, structure, ...}, also
-- holding those dropped earlier in the same script). A dangling id popped from wait or
-- prioritized is removed from active again and takes no slot, no lock, no token and no limiter
-- count.
--
-- An isolated job runs alone in its worker: a fetch takes one only as its first job, for a
-- worker that is not busy, and then takes nothing more; so the next time it kills its worker
-- it kills nothing else, and the stalled check knows whom to blame. The isolated jobs a fetch
-- meets otherwise are set aside (up to SET_ASIDE_MAX) and put back where they were, and
-- set_aside counts them (the worker then makes room: docs/protocol/worker-rules.md).
local function fetch_jobs(k, now, count, w)
  local meta = redis.call("HMGET", k.meta, "paused", "concurrency", "max", "duration")
  local concurrency = tonumber(meta[2])
  local blocked = meta[1] ~= false
    or (concurrency ~= nil and active_count(k) >= concurrency)
  promote_due_delayed(k, now, blocked)
  if k.grouped then
    promote_due_grouped(k, now, blocked)
  end

  local max_jobs = tonumber(meta[3]) or w.limiter_max
  local duration = w.limiter_duration or tonumber(meta[4])
  local taken = {}
  local ttl = rate_limit_ttl(k.limiter, max_jobs)
  if ttl > 0 then
    return {taken, ttl, 0, dangling_jobs, 0}
  end
  if meta[1] or count <= 0 then
    return {taken, 0, 0, dangling_jobs, 0}
  end
  local aside = {}
  local alone = false -- an isolated job was taken: nothing more
  local dry = false -- nothing more was ready
  local i = 1
  while i <= count and not alone do
    if concurrency ~= nil and active_count(k) >= concurrency then
      break
    end
    if i > 1 then
      ttl = rate_limit_ttl(k.limiter, max_jobs)
      if ttl > 0 then
        break
      end
    end
    local id, source, score, gid = pop_next(k, now)
    if not id then
      dry = true
      break
    end
    local job_key = job_hash_key(k.prefix, id)
    local exists = redis.call("EXISTS", job_key) == 1
    local lone = exists and isolated(job_key)
    if not exists then
      -- checked before any write: a lock or an HSET here would fake a job
      if gid then
        group_untake(k.g)
        redis.call("ZREM", k.g.waiting, id)
        group_release(k.g, gid, id, now, true)
      else
        redis.call("LREM", k.active, 1, id)
      end
      drop_dangling(id, source)
    elseif lone and (w.busy or i > 1) then
      if gid then
        group_untake(k.g)
      else
        redis.call("LPOP", k.active) -- pushed there by pop_next just now
      end
      aside[#aside + 1] = {id, source, score, gid}
      if #aside >= SET_ASIDE_MAX then
        break
      end
    else
      alone = lone
      local token = w.token_prefix
      if w.token_start then -- nil: the prefix is the whole token (one job)
        token = token .. int_str(w.token_start + i - 1)
      end
      taken[#taken + 1] = id
      taken[#taken + 1] = token
      taken[#taken + 1] = start_job(k, job_key, id, token, now, w, max_jobs, duration)
      i = i + 1
    end
  end
  if k.grouped then
    group_flush_taken(k.g)
  end
  put_back(k, aside, now)
  if #taken > 0 or #aside > 0 then -- set aside for another worker: wake the idle ones
    add_base_marker(k.marker)
  end
  if #taken > 0 and not dry then
    return {taken, ttl, 0, dangling_jobs, #aside}
  end
  -- Nothing (more) was ready: when the next delayed job falls due, so the worker's wait on the
  -- marker ends then, also when this call took some jobs (a worker whose only wake-up was the
  -- delay marker, popped by another worker, would else sleep out its drain delay).
  local first = redis.call("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
  local next_due = 0
  if first[1] then
    next_due = math.floor(tonumber(first[2]) / 4096)
  end
  if k.grouped then
    local grouped_due = group_next_due(k.g)
    if grouped_due > 0 and (next_due == 0 or grouped_due < next_due) then
      next_due = grouped_due
    end
  end
  if #taken > 0 then
    return {taken, ttl, next_due, dangling_jobs, #aside}
  end
  return {taken, 0, next_due, dangling_jobs, #aside}
end
