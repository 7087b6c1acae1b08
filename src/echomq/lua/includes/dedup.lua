-- Deduplication when a job is added (docs/protocol/scripts.md#step-dedup). Needs "common" and
-- "job_keys".
--
-- `q` holds the job's queue keys (prefix, events, delayed, active); `spec` is the decoded `de`
-- option {id, ttl?, extend?, replace?, keepLastIfActive?}; `new_id` the id this add stores if
-- it goes on; name, data and opts its fields (kept aside for keepLastIfActive).
-- Returns nil when the add goes on (the dedup key then names `new_id`), or the id of the job
-- that owns the window: the add is deduplicated and stores nothing.

-- The window's key set to `job_id`: without expiry for keepLastIfActive (the window lasts
-- until the owner finishes) or without ttl, else for ttl ms. `nx`: only if it is free.
local function dedup_set(key, job_id, spec, nx)
  local ttl = tonumber(spec.ttl)
  if spec.keepLastIfActive or not ttl or ttl <= 0 then
    if nx then
      return redis.call("SET", key, job_id, "NX")
    end
    return redis.call("SET", key, job_id)
  end
  if nx then
    return redis.call("SET", key, job_id, "PX", ttl, "NX")
  end
  return redis.call("SET", key, job_id, "PX", ttl)
end

-- A key without expiry whose owner hash is gone (left by a crash or a manual delete) does not
-- block adds: it is taken over by `new_id`.
local function dedup_take_stale(q, key, spec, owner, new_id)
  if redis.call("PTTL", key) ~= -1
      or redis.call("EXISTS", job_hash_key(q.prefix, owner)) == 1 then
    return false
  end
  redis.call("DEL", key, dedup_next_key(q.prefix, spec.id))
  dedup_set(key, new_id, spec, false)
  return true
end

local function in_list(list_key, value)
  local pos = redis.pcall("LPOS", list_key, value)
  if type(pos) ~= "table" then
    return pos ~= false and pos ~= nil
  end
  for _, item in ipairs(redis.call("LRANGE", list_key, 0, -1)) do
    if item == value then
      return true
    end
  end
  return false
end

local function deduplicated_event(q, max_len, kept_id, dedup_id, dropped_id)
  redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "deduplicated",
    "jobId", kept_id, "deduplicationId", dedup_id, "deduplicatedJobId", dropped_id)
end

-- keepLastIfActive with an active owner: the add waits in `dn:<id>` (the latest one wins)
-- until the owner finishes, and the window lasts until then.
local function dedup_keep_next(q, key, spec, owner, new_id, name, data, opts, max_len)
  if not spec.keepLastIfActive or not in_list(q.active, owner) then
    return false
  end
  local next_key = dedup_next_key(q.prefix, spec.id)
  redis.call("DEL", next_key)
  redis.call("HSET", next_key, "name", name, "data", data, "opts", opts, "jid", new_id)
  redis.call("PERSIST", key)
  deduplicated_event(q, max_len, owner, spec.id, new_id)
  return true
end

-- replace: an owner still delayed is deleted and the new job takes its place.
local function dedup_replace(q, key, spec, new_id, name, data, opts, max_len)
  local owner = redis.call("GET", key)
  if not owner then
    dedup_set(key, new_id, spec, false)
    return nil
  end
  if redis.call("ZREM", q.delayed, owner) == 1 then
    delete_job_keys(job_hash_key(q.prefix, owner))
    redis.call("XADD", q.events, "*", "event", "removed", "jobId", owner, "prev", "delayed")
    deduplicated_event(q, max_len, new_id, spec.id, owner)
    redis.call("DEL", dedup_next_key(q.prefix, spec.id))
    local ttl = tonumber(spec.ttl)
    if not spec.keepLastIfActive and ttl and ttl > 0 and not spec.extend then
      redis.call("SET", key, new_id, "KEEPTTL")
    else
      dedup_set(key, new_id, spec, false)
    end
    return nil
  end
  if dedup_take_stale(q, key, spec, owner, new_id) then
    return nil
  end
  dedup_keep_next(q, key, spec, owner, new_id, name, data, opts, max_len)
  return owner
end

local function deduplicate(q, spec, new_id, name, data, opts, max_len)
  local key = dedup_key(q.prefix, spec.id)
  if spec.replace then
    return dedup_replace(q, key, spec, new_id, name, data, opts, max_len)
  end
  local ttl = tonumber(spec.ttl)
  local owner
  if spec.extend and ttl and ttl > 0 then
    owner = redis.call("GET", key)
    if not owner then
      dedup_set(key, new_id, spec, false)
      return nil
    end
  elseif dedup_set(key, new_id, spec, true) then
    return nil
  else
    owner = redis.call("GET", key)
  end
  if dedup_take_stale(q, key, spec, owner, new_id) then
    return nil
  end
  if dedup_keep_next(q, key, spec, owner, new_id, name, data, opts, max_len) then
    return owner
  end
  if spec.extend and ttl and ttl > 0 then
    dedup_set(key, owner, spec, false) -- restart the window
  end
  deduplicated_event(q, max_len, owner, spec.id, new_id)
  return owner
end
