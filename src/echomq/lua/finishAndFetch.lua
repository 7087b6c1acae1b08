--[[
  finishAndFetch: record the outcome of several active jobs, then take up to N new jobs.
  One call does, per item and in order, exactly what BullMQ's moveToFinished (completed /
  failed), retryJob and moveToDelayed do to keys, fields and events
  (docs/protocol/scripts.md#script-finishAndFetch), then
  what moveToActive does for each job it takes. With no items it is moveToActive.

  KEYS[1]  prefix "P:Q:": job keys and the de:<id> / dn:<id> keys of deduplication are built
           from it (includes/job_keys.lua); its hash tag keeps them in the queue's Cluster slot
  KEYS[2]  wait
  KEYS[3]  active
  KEYS[4]  prioritized
  KEYS[5]  pc
  KEYS[6]  delayed
  KEYS[7]  meta
  KEYS[8]  events
  KEYS[9]  marker
  KEYS[10] stalled
  KEYS[11] limiter
  KEYS[12] id
  KEYS[13] waiting-children
  KEYS[14] completed
  KEYS[15] failed
  KEYS[16] metrics:completed
  KEYS[17] metrics:completed:data
  KEYS[18] metrics:failed
  KEYS[19] metrics:failed:data
  A parent in another queue (a flow) has its keys derived from its parent reference.

  ARGV[1]  now (ms)
  ARGV[2]  items: JSON array of arrays
           [kind, jobId, token, value, attempts, keepCount, keepAge, keepLimit, fields, delayMs,
            flag, group]
           kind "C" complete (value = returnvalue JSON text), "F" fail (value = failedReason),
           "R" retry now (flag 1 = lifo), "D" move to delayed (flag 1 = do not count an attempt).
           keepAge/keepLimit: "" when unset; fields: flat array of hash fields to set first.
           group (echomq): the job's `gid`; absent (no group, or a client that does not send
           it): the script reads `gid` when the job is not in `active`.
  ARGV[3]  how many jobs to take afterwards (0 = none), less one per completion refused with
           -4 or -9 (that parent still holds its slot)
  ARGV[4]  lock token prefix; the i-th job taken gets token prefix .. (ARGV[5] + i - 1)
  ARGV[5]  first token counter; "" when the prefix is the whole token (fetch one job only:
           a manual get_next_job(token))
  ARGV[6]  lock duration (ms)
  ARGV[7]  worker limiter max, or ""
  ARGV[8]  worker limiter duration (ms), or ""
  ARGV[9]  worker name, or ""
  ARGV[10] metrics max data points, or "" (no metrics)
  ARGV[11] "1" when this call resends one whose reply was lost (the connection broke after
           the call was written), else "" or absent. The lost send ran entirely or not at
           all, so a resend is made safe in two ways:
           - an item whose job is missing or whose lock is gone is looked up where the item
             would have put the job (completed / failed, delayed, wait or prioritized; a job
             deleted by keepCount 0 counts as finished); found there, its code is 1;
           - the jobs the lost send took still hold its tokens (prefix .. ARGV[5] + i - 1):
             if any is in `active`, those jobs are returned again and no more are taken.
  ARGV[12] "1" when the worker is busy (it holds jobs other than those this call finishes,
           or has another fetching call in flight): it takes no isolated job (`iso`,
           includes/fetch.lua), else "" or absent

  Returns: {codes, taken, rate_limit_ttl, next_delayed_due, dangling, set_aside}
    codes: one integer per item, 0, 1 (recorded by the lost send of a resent call) or an
      error code: -1 job missing, -2 lock missing, -3 not active, -4 pending children
      (complete), -6 lock held by another token, -9 failed children (complete)
    taken: flat {id, token, HGETALL, ...}
    dangling: flat {id, structure, ...}: ids removed from wait, prioritized or delayed because
      their job hash was missing (they took no slot)
    set_aside: how many isolated jobs the fetch left where they were (an isolated job runs
      alone in its worker)
]]
--@include "common"
--@include "job_keys"
--@include "enqueue"
--@include "requeue"
--@include "parent"
--@include "parents"
--@include "groups"
--@include "fetch"
--@include "locks"

local now = tonumber(ARGV[1])
local k = {
  prefix = KEYS[1], wait = KEYS[2], active = KEYS[3], prioritized = KEYS[4], pc = KEYS[5],
  delayed = KEYS[6], meta = KEYS[7], events = KEYS[8], marker = KEYS[9], stalled = KEYS[10],
  limiter = KEYS[11], id = KEYS[12], waiting_children = KEYS[13], completed = KEYS[14],
  failed = KEYS[15],
}
k.g = group_keys(k.prefix)
k.grouped = redis.call("EXISTS", k.g.state) == 1
local items = cjson.decode(ARGV[2])
local max_metrics = tonumber(ARGV[10])
local resend = ARGV[11] == "1"

-- Release the caller's lock: 0, or -6 / -2 (nothing written yet in that case).
local function release_lock(job_key, job_id, token)
  if token == "0" then
    return 0
  end
  local lock_key = job_part_key(job_key, "lock")
  local held = redis.call("GET", lock_key)
  if held == token then
    redis.call("DEL", lock_key)
    redis.call("SREM", k.stalled, job_id)
    return 0
  elseif held then
    return -6
  end
  return -2
end

local function trim_finished(target, keep_count, keep_age, keep_limit)
  if keep_age ~= "" then
    local cutoff = now - tonumber(keep_age) * 1000
    local limit = tonumber(keep_limit) or 1000
    local old = redis.call("ZRANGEBYSCORE", target, 0, score_str(cutoff), "LIMIT", 0, limit)
    for _, id in ipairs(old) do
      delete_job_keys(job_hash_key(k.prefix, id))
    end
    if #old > 0 then
      if #old < limit then
        redis.call("ZREMRANGEBYSCORE", target, 0, score_str(cutoff))
      else
        redis.call("ZREM", target, unpack(old))
      end
    end
  end
  if keep_count > 0 then
    local extra = redis.call("ZREVRANGE", target, keep_count, -1)
    for _, id in ipairs(extra) do
      delete_job_keys(job_hash_key(k.prefix, id))
    end
    if #extra > 0 then
      redis.call("ZREMRANGEBYRANK", target, 0, -(keep_count + 1))
    end
  end
end

local function collect_metrics(metrics_key, data_key)
  local count = redis.call("HINCRBY", metrics_key, "count", 1) - 1
  local prev = redis.call("HMGET", metrics_key, "prevTS", "prevCount")
  if not prev[1] then
    redis.call("HSET", metrics_key, "prevTS", now, "prevCount", 0)
    return
  end
  local n = math.floor(now / 60000) - math.floor(tonumber(prev[1]) / 60000)
  if n > max_metrics then
    n = max_metrics
  end
  if n > 0 then
    redis.call("LPUSH", data_key, count - (tonumber(prev[2]) or 0))
    local zeros = {}
    for _ = 2, n do
      zeros[#zeros + 1] = 0
      if #zeros == 7000 then
        redis.call("LPUSH", data_key, unpack(zeros))
        zeros = {}
      end
    end
    if #zeros > 0 then
      redis.call("LPUSH", data_key, unpack(zeros))
    end
    redis.call("LTRIM", data_key, 0, max_metrics - 1)
    redis.call("HSET", metrics_key, "prevCount", count, "prevTS", now)
  end
end

local function release_dedup_key(job_id, dedup_id)
  local de_key = dedup_key(k.prefix, dedup_id)
  local ttl = redis.call("PTTL", de_key)
  if ttl == 0 or (ttl == -1 and redis.call("GET", de_key) == job_id) then
    redis.call("DEL", de_key)
  end
end

-- keepLastIfActive (docs/protocol/flows-dedup-schedulers.md#dedup-keep-last): the add that
-- arrived while the finishing job was active waits in `dn:<id>`; it becomes a job now, owning
-- the dedup key.
local function add_deduplicated_next(dedup_id, max_len)
  local next_key = dedup_next_key(k.prefix, dedup_id)
  local n = redis.call("HMGET", next_key, "name", "data", "opts", "pk", "pd", "pdk", "rjk", "jid")
  if not n[1] and not n[3] then
    return
  end
  local counter = redis.call("INCR", k.id)
  local job_id = n[8] or int_str(counter)
  local job_key = job_hash_key(k.prefix, job_id)
  local ok, opts = pcall(cjson.decode, n[3] or "{}")
  if not ok or type(opts) ~= "table" then
    opts = {}
  end
  local de = type(opts["de"]) == "table" and opts["de"] or {}
  local ttl = tonumber(de["ttl"])
  if de["keepLastIfActive"] or not ttl or ttl <= 0 then
    redis.call("SET", dedup_key(k.prefix, dedup_id), job_id)
  else
    redis.call("SET", dedup_key(k.prefix, dedup_id), job_id, "PX", math.floor(ttl))
  end
  local delay = math.max(0, math.floor(tonumber(opts["delay"]) or 0))
  local priority = math.floor(tonumber(opts["priority"]) or 0)
  local fields = {"name", n[1] or "", "data", n[2] or "{}", "opts", n[3] or "{}",
    "timestamp", int_str(now), "delay", int_str(delay), "priority", int_str(priority)}
  if n[4] then
    fields[#fields + 1] = "parentKey"
    fields[#fields + 1] = n[4]
  end
  if n[5] then
    fields[#fields + 1] = "parent"
    fields[#fields + 1] = n[5]
  end
  if n[7] then
    fields[#fields + 1] = "rjk"
    fields[#fields + 1] = n[7]
  end
  fields[#fields + 1] = "deid"
  fields[#fields + 1] = dedup_id
  local gid = group_of_opts(opts)
  if gid then
    fields[#fields + 1] = "gid"
    fields[#fields + 1] = gid
  end
  redis.call("HSET", job_key, unpack(fields))
  redis.call("XADD", k.events, "*", "event", "added", "jobId", job_id, "name", n[1] or "")
  enqueue_job(k, job_id, delay, now + delay, priority, opts["lifo"] and true or false,
    max_len, nil, gid)
  if n[6] then
    redis.call("SADD", n[6], job_key)
  end
  redis.call("DEL", next_key)
end

local function finish(item, job_id, job_key, completed, max_len)
  local value = item[4]
  local attempts = tonumber(item[5]) or 0
  local keep_count = tonumber(item[6]) or -1
  local linked = redis.call("HMGET", job_key, "parentKey", "parent", "deid")
  if linked[3] then
    release_dedup_key(job_id, linked[3])
    add_deduplicated_next(linked[3], max_len)
  end
  if linked[1] then
    if completed then
      child_completed(k, job_key, linked[1], linked[2], value, now)
    else
      child_failed(k, job_key, linked[1], linked[2], value, now)
    end
  end
  local attempts_made = redis.call("HINCRBY", job_key, "atm", 1)
  local target = completed and k.completed or k.failed
  if keep_count == 0 then
    delete_job_keys(job_key)
    if linked[1] then
      -- Still pending (a failure without a policy): deleting it is a soft removal, which
      -- releases a waiting parent left with nothing pending
      -- (docs/protocol/flows-dedup-schedulers.md#child-outcomes).
      local deps = job_part_key(linked[1], "dependencies")
      if redis.call("SREM", deps, job_key) == 1 and redis.call("SCARD", deps) == 0 then
        local p = parent_of(k, linked[1], linked[2])
        if redis.call("ZREM", p.pq.waiting_children, p.id) == 1 then
          push_parent_to_wait(p.pq, p.id)
          redis.call("XADD", p.pq.events, "*", "event", "waiting", "jobId", p.id,
            "prev", "waiting-children")
        end
      end
    end
  else
    redis.call("ZADD", target, now, job_id)
    if completed then
      redis.call("HSET", job_key, "returnvalue", value, "finishedOn", now)
    else
      redis.call("HSET", job_key, "failedReason", value, "finishedOn", now)
      redis.call("HDEL", job_key, "defa")
    end
    trim_finished(target, keep_count, item[7], item[8])
  end
  if completed then
    redis.call("XADD", k.events, "*", "event", "completed", "jobId", job_id,
      "returnvalue", value, "prev", "active")
  else
    redis.call("XADD", k.events, "*", "event", "failed", "jobId", job_id,
      "failedReason", value, "prev", "active")
    if attempts_made >= attempts then
      redis.call("XADD", k.events, "*", "event", "retries-exhausted", "jobId", job_id,
        "attemptsMade", attempts_made)
    end
  end
  if max_metrics then
    if completed then
      collect_metrics(KEYS[16], KEYS[17])
    else
      collect_metrics(KEYS[18], KEYS[19])
    end
  end
end

local function retry_now(item, job_id, job_key, max_len, gid)
  local priority = tonumber(redis.call("HGET", job_key, "priority")) or 0
  if gid then
    group_place(k.g, job_id, gid, priority, item[11] == 1, now)
    if not paused_or_maxed(k.meta, k.active) then
      add_base_marker(k.marker)
    end
  else
    requeue_ready(k.wait, k.prioritized, k.pc, k.marker, paused_or_maxed(k.meta, k.active),
      priority, job_id, item[11] == 1 and "RPUSH" or "LPUSH")
  end
  redis.call("HINCRBY", job_key, "atm", 1)
  redis.call("XADD", k.events, "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", job_id,
    "prev", "active")
end

local function move_to_delayed(item, job_id, job_key, max_len, gid)
  local delay = tonumber(item[10]) or 0
  local due = now + delay
  if item[11] ~= 1 then
    redis.call("HINCRBY", job_key, "atm", 1)
  end
  redis.call("HSET", job_key, "delay", int_str(delay))
  if gid then
    group_delay(k.g, k.marker, job_id, due)
  else
    redis.call("ZADD", k.delayed, score_str(delayed_score(k.delayed, due)), job_id)
  end
  redis.call("XADD", k.events, "MAXLEN", "~", max_len, "*", "event", "delayed", "jobId", job_id,
    "delay", int_str(due))
end

-- Resent call: was this item recorded by the send whose reply was lost?
local function recorded_before(kind, job_id, keep_count)
  if kind == "C" or kind == "F" then
    if keep_count == 0 and redis.call("EXISTS", job_hash_key(k.prefix, job_id)) == 0 then
      return true
    end
    local target = kind == "C" and k.completed or k.failed
    return redis.call("ZSCORE", target, job_id) ~= false
  elseif kind == "D" then
    return redis.call("ZSCORE", k.delayed, job_id) ~= false
      or (k.grouped and redis.call("ZSCORE", k.g.delayed, job_id) ~= false)
  end
  return redis.call("ZSCORE", k.prioritized, job_id) ~= false
    or redis.call("LPOS", k.wait, job_id) ~= false
    or (k.grouped and redis.call("ZSCORE", k.g.waiting, job_id) ~= false)
end

-- Resent call: the jobs of `active` locked with a token the lost send handed out.
local function taken_before(want)
  local tokens = {}
  local first = tonumber(ARGV[5])
  if not first then
    tokens[ARGV[4]] = true
  end
  for i = 1, first and want or 0 do
    tokens[ARGV[4] .. int_str(first + i - 1)] = true
  end
  local taken = {}
  local grouped_active = k.grouped and k.g.active or nil
  for _, job in ipairs(jobs_locked_by(k.prefix, k.active, grouped_active, tokens)) do
    taken[#taken + 1] = job[1]
    taken[#taken + 1] = job[2]
    taken[#taken + 1] = redis.call("HGETALL", job_hash_key(k.prefix, job[1]))
  end
  return taken
end

-- (echomq) A job left `active` and this call took none: if the queue has a global concurrency
-- and jobs wait, the adds made while it was maxed wrote no marker, so idle workers (ours and
-- Node's) would sleep out their drain delay beside a free slot. Wake them.
local function wake_if_slot_freed()
  local meta = redis.call("HMGET", k.meta, "paused", "concurrency")
  if meta[1] or not meta[2] or active_count(k) >= tonumber(meta[2]) then
    return
  end
  if redis.call("LLEN", k.wait) > 0 or redis.call("ZCARD", k.prioritized) > 0
    or (k.grouped and redis.call("LLEN", k.g.ready) > 0) then
    add_base_marker(k.marker)
  end
end

local codes = {}
local any_delayed = false
local any_finished = false
local left_active = false
if #items > 0 then
  local max_len = max_events(k.meta)
  local trimmed = false
  for i, item in ipairs(items) do
    local kind, job_id, token = item[1], item[2], item[3]
    local job_key = job_hash_key(k.prefix, job_id)
    local code = 0
    if kind == "R" then
      -- retryJob promotes due delayed jobs before anything else
      promote_due_delayed(k, now, paused_or_maxed(k.meta, k.active))
    end
    if redis.call("EXISTS", job_key) == 0 then
      code = -1
    elseif kind == "C" and redis.call("EXISTS", job_part_key(job_key, "dependencies"),
        job_part_key(job_key, "unsuccessful")) > 0 then
      -- empty sets do not exist, so one EXISTS tells whether either check can fail
      if redis.call("SCARD", job_part_key(job_key, "dependencies")) > 0 then
        code = -4
      else
        code = -9
      end
    else
      code = release_lock(job_key, job_id, token)
    end
    if resend and (code == -1 or code == -2)
        and recorded_before(kind, job_id, tonumber(item[6]) or -1) then
      code = 1
    end
    if code == 0 then
      local fields = item[9]
      if type(fields) == "table" and #fields > 0 then
        redis.call("HSET", job_key, unpack(fields))
      end
      -- (a suspect in groups:stalled is skipped by the check once out of groups:active)
      local gid = k.grouped and item[12] or nil
      local left = 0
      if gid then -- the worker named the job's group: its job is in groups:active
        left = redis.call("LREM", k.g.active, -1, job_id)
      end
      if left == 0 then
        gid = nil
        left = redis.call("LREM", k.active, -1, job_id)
        if left == 0 and k.grouped and item[12] == nil then -- the item names no group
          gid = redis.call("HGET", job_key, "gid") or nil
          if gid and redis.call("LREM", k.g.active, -1, job_id) > 0 then
            left = 1
          else
            gid = nil
          end
        end
      end
      if left == 0 then
        code = -3
      else
        left_active = true
        if gid then
          group_release(k.g, gid, job_id, now)
        end
        if kind == "C" or kind == "F" then
          if not trimmed then
            redis.call("XTRIM", k.events, "MAXLEN", "~", max_len)
            trimmed = true
          end
          finish(item, job_id, job_key, kind == "C", max_len)
          any_finished = true
        elseif kind == "R" then
          retry_now(item, job_id, job_key, max_len, gid)
        else
          move_to_delayed(item, job_id, job_key, max_len, gid)
          any_delayed = true
        end
      end
    end
    codes[i] = code
  end
end

local want = tonumber(ARGV[3])
-- A parent whose completion was refused (-4, -9) stays active under its lock until the worker
-- records its failure: its slot is not free yet (BullMQ fails it before fetching).
for _, code in ipairs(codes) do
  if code == -4 or code == -9 then
    want = want - 1
  end
end
if want < 0 then
  want = 0
end
local fetched = {{}, 0, 0}
local again = want > 0 and resend and taken_before(want) or {}
if #again > 0 then
  fetched = {again, 0, 0, {}}
elseif want > 0 then
  fetched = fetch_jobs(k, now, want, {
    token_prefix = ARGV[4], token_start = tonumber(ARGV[5]), lock_ms = ARGV[6],
    limiter_max = tonumber(ARGV[7]), limiter_duration = tonumber(ARGV[8]), name = ARGV[9],
    busy = ARGV[12] == "1",
  })
end
if any_delayed then
  refresh_delay_marker(k.marker, k.delayed)
end
if left_active and #fetched[1] == 0 then
  wake_if_slot_freed()
end
if any_finished and #fetched[1] == 0 and fetched[2] == 0 and fetched[3] == 0 then
  if redis.call("LLEN", k.wait) == 0 and active_count(k) == 0
    and redis.call("ZCARD", k.prioritized) == 0
    and not (k.grouped and redis.call("ZCARD", k.g.waiting) > 0) then
    redis.call("XADD", k.events, "*", "event", "drained")
  end
end
return {codes, fetched[1], fetched[2], fetched[3], dangling_jobs, fetched[5] or 0}
