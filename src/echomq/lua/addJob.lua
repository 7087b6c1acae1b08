--[[
  addJob: store new jobs and put each in `wait`, `prioritized` or `delayed`
  (docs/protocol/scripts.md#script-addJob).
  One call adds one job, or several (a bulk add): ARGV holds 12 values per job, and each job
  gets exactly the keys, fields and events a call for it alone would write.

  KEYS[1]  prefix "P:Q:": job keys are built from it (includes/job_keys.lua); its hash tag
           keeps them in the queue's Cluster slot
  KEYS[2]  id
  KEYS[3]  meta
  KEYS[4]  events
  KEYS[5]  wait
  KEYS[6]  active
  KEYS[7]  prioritized
  KEYS[8]  pc
  KEYS[9]  delayed
  KEYS[10] marker
  KEYS[11] completed (a duplicate child that already completed counts as processed)

  ARGV, 12 values per job (the i-th job's values start at ARGV[12 * (i - 1) + 1]):
  ARGV[1]  custom job id, or ""
  ARGV[2]  name
  ARGV[3]  timestamp (ms)
  ARGV[4]  data (JSON text)
  ARGV[5]  opts (JSON text, compressed option names)
  ARGV[6]  delay (ms, >= 0)
  ARGV[7]  priority (0 .. 2^21-1)
  ARGV[8]  "1" for lifo, else "0"
  ARGV[9]  parent key "P':Q':<id>" (a job key, possibly of another queue), or ""
  ARGV[10] parent JSON {"id":..,"queueKey":..}, or ""
  ARGV[11] deduplication JSON {"id":..[,"ttl":ms][,"extend":true][,"replace":true]
           [,"keepLastIfActive":true]} (the `de` option), or "" (never with a parent)
  ARGV[12] group id (echomq's groups, docs/protocol/groups.md), or "": a grouped job is stored
           with `gid` and placed in its group instead of wait / prioritized / delayed

  Returns: for one job, its id (string); for several, the array of their results. A custom id
  whose hash exists gives that id after a `duplicated` event, storing nothing; with a parent,
  that existing job is attached to it (docs/protocol/scripts.md#step-child-add). A
  deduplicated add gives {owner id} (a one-element array; for a call of one job, wrapped once
  more: {{owner id}}) and stores nothing (docs/protocol/scripts.md#step-dedup).
  Errors (in place of the id, before anything of that job is written): -5 the parent hash does
  not exist; -7 the existing job of that custom id belongs to another parent that exists.

  Which list: delay > 0 -> delayed (even with a priority); else priority > 0 -> prioritized;
  else wait (LPUSH, or RPUSH for lifo); a grouped job likewise in its group's structures.
  `id` is INCRed on every call, as Node does.
]]
--@include "common"
--@include "job_keys"
--@include "enqueue"
--@include "parent"
--@include "child_add"
--@include "dedup"

local q = {
  prefix = KEYS[1], id = KEYS[2], meta = KEYS[3], events = KEYS[4], wait = KEYS[5],
  active = KEYS[6], prioritized = KEYS[7], pc = KEYS[8], delayed = KEYS[9], marker = KEYS[10],
  completed = KEYS[11],
}
local max_len = nil
local blocked = nil -- paused or maxed; adds cannot change it, so it is read once per call

local function add_one(o)
  local custom, name, ts, data, opts = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4],
    ARGV[o + 5]
  local delay_arg, priority_arg = ARGV[o + 6], ARGV[o + 7]
  local parent_key, parent_json, dedup = ARGV[o + 9], ARGV[o + 10], ARGV[o + 11]
  local gid = ARGV[o + 12] ~= "" and ARGV[o + 12] or nil
  if parent_key ~= "" and redis.call("EXISTS", parent_key) == 0 then
    return -5
  end

  local existing = custom ~= "" and redis.call("EXISTS", job_hash_key(q.prefix, custom)) == 1
  if existing and child_conflicts(job_hash_key(q.prefix, custom), parent_key) then
    return -7
  end

  local counter = redis.call("INCR", q.id)
  max_len = max_len or max_events(q.meta)
  local job_id = custom
  if job_id == "" then
    job_id = int_str(counter)
  end
  local job_key = job_hash_key(q.prefix, job_id)

  if existing then
    if parent_key ~= "" and attach_existing_child(q, job_id, job_key, parent_key, parent_json) then
      release_if_no_pending(q, parent_key, parent_json, tonumber(ts))
    end
    redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "duplicated",
      "jobId", job_id)
    return job_id
  end

  local dedup_id = nil
  if dedup ~= "" then
    local spec = cjson.decode(dedup)
    local owner = deduplicate(q, spec, job_id, name, data, opts, max_len)
    if owner then
      return { owner }
    end
    dedup_id = spec.id
  end

  local delay = tonumber(delay_arg)
  local priority = tonumber(priority_arg)
  if parent_key ~= "" then
    redis.call("HSET", job_key, "name", name, "data", data, "opts", opts, "timestamp", ts,
      "delay", delay_arg, "priority", priority_arg, "parentKey", parent_key,
      "parent", parent_json)
  elseif dedup_id then
    redis.call("HSET", job_key, "name", name, "data", data, "opts", opts, "timestamp", ts,
      "delay", delay_arg, "priority", priority_arg, "deid", dedup_id)
  else
    redis.call("HSET", job_key, "name", name, "data", data, "opts", opts, "timestamp", ts,
      "delay", delay_arg, "priority", priority_arg)
  end
  if gid then
    redis.call("HSET", job_key, "gid", gid)
  end
  redis.call("XADD", q.events, "*", "event", "added", "jobId", job_id, "name", name)

  blocked = enqueue_job(q, job_id, delay, tonumber(ts) + delay, priority, ARGV[o + 8] == "1",
    max_len, blocked, gid)

  if parent_key ~= "" then
    redis.call("SADD", job_part_key(parent_key, "dependencies"), job_key)
  end
  return job_id
end

local count = #ARGV / 12
if count == 1 then
  local result = add_one(0)
  if type(result) == "table" then
    return { result }
  end
  return result
end
local ids = {}
for i = 1, count do
  ids[i] = add_one((i - 1) * 12)
end
return ids
