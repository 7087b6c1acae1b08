-- Groups: each group's waiting jobs apart, fleet-wide limits per group, and a fair rotation
-- (echomq's extension, docs/protocol/groups.md). Needs "common" and "job_keys"; `g` is
-- group_keys(prefix):
--   g.index    ZSET gid -> its waiting jobs; a group is listed while it has waiting or active jobs
--   g.ready    LIST the rotation, served from its tail and rotated with RPOPLPUSH onto itself:
--              once each group that has waiting jobs and may run now, and "" standing for the
--              ungrouped jobs (wait, prioritized) while any group is in it
--   g.active   LIST grouped jobs being processed. Never `active`: BullMQ's stalled check would
--              move a crashed worker's grouped job to `wait`, where a BullMQ worker takes it
--   g.stalled  SET  grouped active jobs suspected at the last stalled check
--   g.delayed  ZSET grouped delayed jobs, scored as in `delayed` (which BullMQ promotes to wait)
--   g.waiting  ZSET every grouped waiting job -> when it became waiting (ms), for the getters
--   g.state    HASH "seq" order counter; per group "p:<gid>" paused; limits "c" / "c:<gid>"
--              concurrency and "r" / "r:<gid>" rate "<max>:<window ms>" (the default for every
--              group / one group's own)
--   g.limited  ZSET gid -> when its full rate window has room (out of the rotation until then;
--              +inf until one of its running jobs ends)
-- and per group "P:Q:groups:run:<gid>" (a counter: 2 * its active jobs + 1 while it is in the
-- rotation, so one INCRBY moves a job and tells both; deleted at 0 once the group leaves the
-- index), its waiting jobs as the ungrouped ones are kept: "P:Q:groups:wait:<gid>" (LIST, the
-- jobs without a priority, taken from its head: fifo ones pushed at its tail, lifo ones at its
-- head) and "P:Q:groups:prioritized:<gid>" (ZSET id -> priority * 2^32 + order, taken once the
-- LIST is empty), and "P:Q:groups:limit:<gid>" (ZSET: its rate entries, "<id>@<processedOn>" ->
-- +inf while that job runs, then when it ended; see "The rate window" below).
--
-- Cost: a fetch pops the rotation's head and pushes it back to its tail (O(1)); a group that is
-- paused, at its concurrency or at its rate limit leaves the rotation when met and joins it
-- again when that ends (a job of it ends, resume, the window ends), so it is never met in vain
-- twice. Per job: O(1) in the group's LIST (O(log n) in its ZSET for a job with a priority),
-- O(log n) in the index and g.waiting.

local GROUP_ORDER = 2147483648 -- 2^31: lifo jobs below it within a priority, fifo above

-- Whether a group has waiting jobs.
local function group_has_waiting(g, gid)
  return redis.call("EXISTS", group_wait_key(g.prefix, gid), group_prio_key(g.prefix, gid)) > 0
end

-- A waiting job into its group's structure: without a priority, at the tail of its LIST (the
-- head for lifo); with one, into its ZSET at the back of its priority (the front for lifo).
local function group_enqueue(g, job_id, gid, priority, lifo)
  if priority > 0 then
    local seq = redis.call("HINCRBY", g.state, "seq", "1") % GROUP_ORDER
    local order = lifo and (GROUP_ORDER - seq) or (GROUP_ORDER + seq)
    redis.call("ZADD", group_prio_key(g.prefix, gid), score_str(priority * 4294967296 + order),
      job_id)
  elseif lifo then
    redis.call("LPUSH", group_wait_key(g.prefix, gid), job_id)
  else
    redis.call("RPUSH", group_wait_key(g.prefix, gid), job_id)
  end
end

-- Take a waiting job out of its group's structure; false when it was in neither.
local function group_dequeue(g, gid, job_id)
  return redis.call("ZREM", group_prio_key(g.prefix, gid), job_id) == 1
    or redis.call("LREM", group_wait_key(g.prefix, gid), 1, job_id) == 1
end

-- The next waiting job of a group, out of its structure, and its score in the ZSET (false for
-- one from the LIST); nil when it has none.
local function group_pop(g, gid)
  local id = redis.call("LPOP", group_wait_key(g.prefix, gid))
  if id then
    return id, false
  end
  local top = redis.call("ZPOPMIN", group_prio_key(g.prefix, gid))
  return top[1], top[2]
end

-- The group named in a decoded `opts` object (`emqGroup`, echomq's option), or nil.
local function group_of_opts(opts)
  local gid = opts["emqGroup"]
  if type(gid) == "string" and gid ~= "" then
    return gid
  end
  return nil
end

-- Settings read once per call (a script changing one reads it only after the change): the
-- defaults {concurrency, rate, whether any group has a setting of its own ("o" counts them)},
-- and each group's own {concurrency, rate, paused}, read only when "o" says some exist.
local group_defaults = nil
local group_own = {}

-- The defaults, read at the first need.
local function group_load_defaults(g)
  if not group_defaults then
    local v = redis.call("HMGET", g.state, "c", "r", "o")
    group_defaults = {tonumber(v[1]), v[2] or nil, (tonumber(v[3]) or 0) > 0}
  end
  return group_defaults
end

-- A group's concurrency (nil: none), rate max and window ms (nil: none) and whether it is
-- paused.
local function group_settings(g, gid)
  group_load_defaults(g)
  local concurrency, rate, paused = group_defaults[1], group_defaults[2], false
  if group_defaults[3] then
    local own = group_own[gid]
    if not own then
      local v = redis.call("HMGET", g.state, "c:" .. gid, "r:" .. gid, "p:" .. gid)
      own = {tonumber(v[1]), v[2] or nil, v[3] ~= false}
      group_own[gid] = own
    end
    concurrency, rate, paused = own[1] or concurrency, own[2] or rate, own[3]
  end
  local max_jobs, window
  if rate then
    local sep = string.find(rate, ":", 1, true)
    if sep then
      max_jobs = tonumber(string.sub(rate, 1, sep - 1))
      window = tonumber(string.sub(rate, sep + 1))
    end
  end
  return concurrency, max_jobs, window, paused
end

-- Whether no group has a limit or a setting of its own (no default concurrency or rate, and
-- "o" counts none): then a group is never paused nor held, and its take and release skip the
-- settings.
local function group_unlimited(g)
  local d = group_load_defaults(g)
  return not (d[1] or d[2] or d[3])
end

-- group_settings, and how many of the group's jobs are active (read only when it has a
-- concurrency, else 0).
local function group_limits(g, gid, state)
  local concurrency, max_jobs, window, paused = group_settings(g, gid)
  local running = 0
  if concurrency then
    state = state or tonumber(redis.call("GET", group_run_key(g.prefix, gid))) or 0
    running = math.floor(state / 2)
  end
  return concurrency, max_jobs, window, paused, running
end

-- Whether a group may be in the rotation: not paused, below its concurrency, its rate window
-- not known to be full. `state` is its "groups:run:<gid>" when the caller holds it (read, or
-- returned by the INCRBY that changed it), so that it is not read again.
local function group_may_run(g, gid, state)
  local concurrency, _, _, paused, running = group_limits(g, gid, state)
  if paused or (concurrency and running >= concurrency) then
    return false
  end
  return redis.call("ZSCORE", g.limited, gid) == false
end

-- group_may_run for a caller that knows the group is not in g.limited (it just took it out).
local function group_open(g, gid, state)
  local concurrency, _, _, paused, running = group_limits(g, gid, state)
  return not (paused or (concurrency and running >= concurrency))
end

-- A group's "groups:run:<gid>" (0 when absent).
local function group_state(g, gid)
  return tonumber(redis.call("GET", group_run_key(g.prefix, gid))) or 0
end

-- Whether a group is in the rotation, from its "groups:run:<gid>".
local function group_in_rotation(state)
  return state % 2 == 1
end

-- Put a group at the back of the rotation (its head) unless it is in it; "" first when the
-- rotation was empty, and groups:state made to exist (the fetch reads group keys only when it
-- does). `state` is its "groups:run:<gid>" when the caller has just read it.
local function group_join(g, gid, state)
  if group_in_rotation(state or group_state(g, gid)) then
    return
  end
  redis.call("INCRBY", group_run_key(g.prefix, gid), "1")
  if redis.call("LLEN", g.ready) == 0 then
    redis.call("HSETNX", g.state, "seq", "0")
    redis.call("LPUSH", g.ready, "")
  end
  redis.call("LPUSH", g.ready, gid)
end

-- Join the rotation if not in it and allowed to run (a busy group is in it: one HGET).
local function group_wake(g, gid)
  local state = group_state(g, gid)
  if not group_in_rotation(state) and group_may_run(g, gid, state) then
    group_join(g, gid, state)
  end
end

-- Have idle workers wake at `due` ms at the latest: the delay marker "1" only moves earlier.
local function group_wake_by(marker, due)
  local current = redis.call("ZSCORE", marker, "1")
  if not current or tonumber(current) > due then
    redis.call("ZADD", marker, score_str(due), "1")
  end
end

-- A ready grouped job (added, retried, promoted, recovered, handed back) among its group's
-- waiting jobs, by priority then order; the group joins the rotation if it may run. The caller
-- writes the marker and the events, as for an ungrouped job.
local function group_place(g, job_id, gid, priority, lifo, now)
  group_enqueue(g, job_id, gid, priority, lifo)
  redis.call("ZADD", g.waiting, score_str(now), job_id)
  redis.call("ZINCRBY", g.index, "1", gid)
  group_wake(g, gid)
end

-- A delayed grouped job, due at `due` ms.
local function group_delay(g, marker, job_id, due)
  redis.call("HSETNX", g.state, "seq", "0") -- marks the queue as grouped for the fetch
  redis.call("ZADD", g.delayed, score_str(delayed_score(g.delayed, due)), job_id)
  group_wake_by(marker, due)
end

-- The server's time (ms), for a script given no time that releases a grouped job.
local function group_server_now()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The rate window (docs/protocol/groups.md#groups-rate): each start of a group's job is an
-- entry "<id>@<processedOn>" of groups:limit:<gid>, scored +inf while the job runs and, once it
-- has left g.active, with when it left (ms). The window holds the entries scored after
-- now - window: a start takes a slot that frees a window after its job ends, so no interval of
-- the window's length holds more than `max` starts, nor more than `max` ends.

-- When a group's rate window has room again (ms); 0 when it has room now; -1 when every slot
-- is held by a job still running (room comes a window after one of them ends). Entries that
-- ended before the window are dropped here; a running entry whose job is no longer running
-- that start (no lock, or another processedOn: its end was never recorded) counts as ended now;
-- `fresh`, the entry of a job being taken by this call (not started yet), is not checked.
-- Also returns how many entries the window holds when it has room.
local function group_window_full_until(g, limit_key, max_jobs, window, now, fresh)
  redis.call("ZREMRANGEBYSCORE", limit_key, "-inf", score_str(now - window))
  local held = redis.call("ZCARD", limit_key)
  if held < max_jobs then
    return 0, held
  end
  local oldest = redis.call("ZRANGE", limit_key, 0, 0, "WITHSCORES")
  if oldest[2] ~= "inf" then
    return tonumber(oldest[2]) + window
  end
  local stale = false
  local running = redis.call("ZRANGEBYSCORE", limit_key, "+inf", "+inf", "LIMIT", 0, 1000)
  for _, entry in ipairs(running) do
    if entry ~= fresh then
      local id, started = string.match(entry, "^(.*)@(%d+)$")
      local job_key = id and job_hash_key(g.prefix, id)
      if not id or redis.call("EXISTS", job_part_key(job_key, "lock")) == 0
          or redis.call("HGET", job_key, "processedOn") ~= started then
        redis.call("ZADD", limit_key, score_str(now), entry)
        stale = true
      end
    end
  end
  return stale and now + window or -1
end

-- A group whose rate window is full waits in g.limited until `until_ms`, or with -1 (every slot
-- held by a running job) scored +inf until one of them ends (group_release re-scores it).
local function group_limit_until(g, gid, until_ms)
  redis.call("ZADD", g.limited, until_ms > 0 and score_str(until_ms) or "+inf", gid)
end

-- A started job of the group left g.active: its rate entry ends now, or with `drop` (a job
-- set aside by the fetch that took it, which never ran) goes. The window key expires a window
-- after its last entry ended, once no job of it runs. Nothing when the group has no rate
-- limit (an entry left running by a limit removed meanwhile counts as ended when met).
local function group_end_start(g, gid, id, now, drop)
  local _, max_jobs, window = group_settings(g, gid)
  if not max_jobs then
    return
  end
  -- a job set aside was taken by this call (its processedOn is that of an earlier start)
  local started = drop and int_str(now)
    or redis.call("HGET", job_hash_key(g.prefix, id), "processedOn")
  if not started then
    return
  end
  local limit_key = group_limit_key(g.prefix, gid)
  local entry = id .. "@" .. started
  if drop then
    redis.call("ZREM", limit_key, entry)
  else
    redis.call("ZADD", limit_key, "XX", score_str(now), entry)
  end
  if redis.call("ZCOUNT", limit_key, "+inf", "+inf") == 0 then
    redis.call("PEXPIRE", limit_key, math.max(1, math.floor(window)))
  end
end

-- A group with neither waiting nor active jobs leaves the index, and its counter goes.
local function group_forget(g, gid)
  redis.call("ZREM", g.index, gid)
  redis.call("DEL", group_run_key(g.prefix, gid))
end

-- A grouped job left g.active (finished, retried, delayed, recovered, handed back, removed) at
-- `now` ms: its rate entry ends (group_end_start; `drop` for a job taken and set aside by the
-- same fetch), its slot is free; the group joins the rotation again if it has waiting jobs and
-- may run, and leaves the index once it has neither waiting nor active jobs.
--
-- A group in the rotation stays there (it has waiting jobs, or the next fetch that meets it
-- drops it): one command without a rate limit. "groups:run:<gid>" may stay at "0" while the
-- group is listed; it goes with the group's entry in the index.
local function group_release(g, gid, id, now, drop)
  if not group_unlimited(g) then
    group_end_start(g, gid, id, now, drop)
  end
  local state = redis.call("INCRBY", group_run_key(g.prefix, gid), "-2")
  if group_in_rotation(state) then
    return
  end
  local running = state / 2
  if group_has_waiting(g, gid) then
    local _, max_jobs, window = group_settings(g, gid)
    if max_jobs then -- (one waiting for a running job to end learns when its window has room)
      local until_ms = group_window_full_until(g, group_limit_key(g.prefix, gid), max_jobs,
        window, now)
      if until_ms ~= 0 then
        group_limit_until(g, gid, until_ms)
        return
      end
      redis.call("ZREM", g.limited, gid)
    end
    if group_may_run(g, gid, state) then
      group_join(g, gid, state)
    end
  elseif running <= 0 then
    group_forget(g, gid)
  end
end

-- Remove a grouped job from its group's waiting jobs; false when it was not there.
local function group_unwait(g, gid, job_id)
  if not group_dequeue(g, gid, job_id) then
    return false
  end
  redis.call("ZREM", g.waiting, job_id)
  local left = tonumber(redis.call("ZINCRBY", g.index, "-1", gid))
  if left <= 0 then
    local state = group_state(g, gid)
    if state == 0 then -- no active job, out of the rotation
      group_forget(g, gid)
    elseif state == 1 then -- in the rotation: its counter goes when a fetch drops it there
      redis.call("ZREM", g.index, gid)
    end
  end
  return true
end

-- The next job of a group, moved to g.active, and its score; nil when the group has none it may
-- run now, and it then leaves the rotation (paused, at its concurrency, its rate window full:
-- it joins again when that ends; nothing waiting: an add brings it back). The caller has just
-- rotated the group to the rotation's head: leaving is an LPOP.
local function group_leave(g, gid)
  redis.call("LPOP", g.ready)
  return redis.call("INCRBY", group_run_key(g.prefix, gid), "-1")
end

-- The jobs a fetch takes (group_take) join g.active and leave g.waiting together when it ends:
-- one LPUSH and one ZREM for them all instead of two commands per job. Until then they are in
-- g.taken, which the fetch counts as active; a job it gives back (it is isolated, or its
-- hash is gone) leaves g.taken with group_untake.
local function group_flush_taken(g)
  local ids = g.taken
  for i = 1, #ids, 1000 do
    local last = math.min(i + 999, #ids)
    redis.call("LPUSH", g.active, unpack(ids, i, last))
    redis.call("ZREM", g.waiting, unpack(ids, i, last))
  end
  g.taken = {}
end

-- Give back the job the fetch took last (still in g.waiting: the caller says where it goes).
local function group_untake(g)
  g.taken[#g.taken] = nil
end

-- group_take when no group has a limit or setting (group_unlimited): the rotation's next job.
local function group_take_unlimited(g, gid)
  local id, score = group_pop(g, gid)
  if not id then
    if group_leave(g, gid) == 0 then -- (see group_take)
      group_forget(g, gid)
    end
    return nil
  end
  g.taken[#g.taken + 1] = id
  redis.call("INCRBY", group_run_key(g.prefix, gid), "2")
  if tonumber(redis.call("ZINCRBY", g.index, "-1", gid)) <= 0 then
    group_leave(g, gid)
  end
  return id, score
end

local function group_take(g, gid, now)
  if group_unlimited(g) then
    return group_take_unlimited(g, gid)
  end
  local concurrency, max_jobs, window, paused, running = group_limits(g, gid)
  local limit_key = max_jobs and group_limit_key(g.prefix, gid)
  local open = not paused and not (concurrency and running >= concurrency)
  local held = 0
  if open and max_jobs then
    local until_ms
    until_ms, held = group_window_full_until(g, limit_key, max_jobs, window, now)
    if until_ms ~= 0 then
      group_limit_until(g, gid, until_ms)
      open = false
    end
  end
  local id, score
  if open then
    id, score = group_pop(g, gid)
  end
  if not id then
    if group_leave(g, gid) == 0 and (open or not group_has_waiting(g, gid)) then
      -- its waiting jobs were removed while it was in the rotation (group_release leaves a
      -- group in the rotation to the fetch), and none runs: it leaves the index now
      group_forget(g, gid)
    end
    return nil
  end
  g.taken[#g.taken + 1] = id -- into g.active and out of g.waiting: group_flush_taken
  running = math.floor(redis.call("INCRBY", group_run_key(g.prefix, gid), "2") / 2)
  local more = tonumber(redis.call("ZINCRBY", g.index, "-1", gid)) > 0
  local full_until = 0
  if max_jobs then
    local entry = id .. "@" .. int_str(now)
    redis.call("ZADD", limit_key, "+inf", entry) -- running
    redis.call("PERSIST", limit_key)
    if held + 1 >= max_jobs then -- (the window was trimmed just now)
      full_until = group_window_full_until(g, limit_key, max_jobs, window, now, entry)
    end
  end
  local maxed = concurrency and running >= concurrency
  if not more or maxed or full_until ~= 0 then
    group_leave(g, gid)
    if more and full_until ~= 0 and not maxed then
      group_limit_until(g, gid, full_until)
    end
  end
  return id, score
end

-- A grouped job taken by this fetch and set aside again (it is isolated): back where it was
-- among its group's waiting jobs, the head of its LIST or its score (false: from the LIST) in
-- its ZSET (group_untake kept it out of g.active and in g.waiting).
local function group_put_back(g, gid, id, score, now)
  if score then
    redis.call("ZADD", group_prio_key(g.prefix, gid), score, id) -- (never left g.waiting)
  else
    redis.call("LPUSH", group_wait_key(g.prefix, gid), id)
  end
  redis.call("ZINCRBY", g.index, "1", gid)
  group_release(g, gid, id, now, true)
end

-- Groups whose rate window has ended join the rotation again (up to 1000 per call).
local function group_reopen(g, now)
  local due = redis.call("ZRANGEBYSCORE", g.limited, 0, score_str(now), "LIMIT", 0, 1000)
  if #due == 0 then
    return 0
  end
  redis.call("ZREM", g.limited, unpack(due))
  for _, gid in ipairs(due) do
    if group_has_waiting(g, gid) and group_may_run(g, gid) then
      group_join(g, gid)
    end
  end
  return #due
end

-- Grouped delayed jobs that are due join their groups (up to 1000 per call), each with a
-- `waiting` event on `events`; an id whose hash is gone is passed to `drop`. Returns how many
-- were promoted.
local function group_promote_due(g, events, now, drop)
  local ids = redis.call("ZRANGEBYSCORE", g.delayed, 0, score_str((now + 1) * 4096 - 1),
    "LIMIT", 0, 1000)
  if #ids == 0 then
    return 0
  end
  redis.call("ZREM", g.delayed, unpack(ids))
  local promoted = 0
  for _, id in ipairs(ids) do
    local job_key = job_hash_key(g.prefix, id)
    local f = redis.call("HMGET", job_key, "gid", "priority")
    if not f[1] then
      drop(id)
    else
      promoted = promoted + 1
      group_place(g, id, f[1], tonumber(f[2]) or 0, false, now)
      redis.call("XADD", events, "*", "event", "waiting", "jobId", id, "prev", "delayed")
      redis.call("HSET", job_key, "delay", 0)
    end
  end
  return promoted
end

-- The earliest time (ms) a grouped job may become ready without an add: a delayed one due, or
-- a group's rate window ending; 0 when none.
local function group_next_due(g)
  local next_due = 0
  local first = redis.call("ZRANGE", g.delayed, 0, 0, "WITHSCORES")
  if first[1] then
    next_due = math.floor(tonumber(first[2]) / 4096)
  end
  local reopen = redis.call("ZRANGEBYSCORE", g.limited, "-inf", "(+inf", "WITHSCORES", "LIMIT",
    0, 1)
  if reopen[1] and (next_due == 0 or tonumber(reopen[2]) < next_due) then
    next_due = math.floor(tonumber(reopen[2]))
  end
  return next_due
end
