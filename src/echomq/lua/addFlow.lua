--[[
  addFlow: store whole trees of parent and child jobs, all or nothing
  (docs/protocol/scripts.md#script-addFlow).
  Every check runs before the first write: a refused call changes nothing. Nodes come parents
  first; a node with children waits in `waiting-children`, a leaf is placed as an add places it.
  Nodes may live in other queues (and prefixes) than KEYS' queue: their keys are derived from
  the node's queue prefix, which on Redis Cluster shares the hash tag of KEYS[1].

  KEYS[1]  prefix "P:Q:" of the first node's queue
  KEYS[2]  id
  KEYS[3]  meta
  KEYS[4]  events
  KEYS[5]  wait
  KEYS[6]  active
  KEYS[7]  prioritized
  KEYS[8]  pc
  KEYS[9]  delayed
  KEYS[10] marker
  KEYS[11] waiting-children
  KEYS[12] completed

  ARGV, 14 values per node (the i-th node's values start at ARGV[14 * (i - 1) + 1]):
  ARGV[1]  node queue, qualified "P:Q" (a queue reference, like a parent's queueKey)
  ARGV[2]  job id (a custom id, or one the client generated)
  ARGV[3]  name
  ARGV[4]  timestamp (ms)
  ARGV[5]  data (JSON text)
  ARGV[6]  opts (JSON text)
  ARGV[7]  delay (ms)
  ARGV[8]  priority
  ARGV[9]  "1" for lifo, else "0"
  ARGV[10] parent key "P':Q':<id>" (a node of this call or an existing job), or ""
  ARGV[11] parent JSON {"id":..,"queueKey":..[,"fpof"|"cpof"|"idof"|"rdof":true]}, or ""
  ARGV[12] "1" with children, else "0"
  ARGV[13] deduplication JSON (the `de` option, as addJob's ARGV[11]), or "": only on a root
           without parent or children
  ARGV[14] group id (echomq's groups, docs/protocol/groups.md), or "": stored as `gid`; a
           grouped leaf is placed in its group, a grouped parent released to it

  Returns: the array of the nodes' ids, in ARGV order. An id whose job exists is not stored
  again: it gets a `duplicated` event and, under a parent, is attached to it
  (docs/protocol/scripts.md#step-child-add). A deduplicated node stores nothing and its entry
  is {owner id} (docs/protocol/scripts.md#step-dedup).
  Errors, as {code, node index} and before anything is written: -5 a parent that is neither a
  node of this call nor an existing job; -7 an existing job of that id belongs to another
  parent that exists.
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
  waiting_children = KEYS[11], completed = KEYS[12],
}
local WIDTH = 14
local count = #ARGV / WIDTH

-- Checks: nothing is written until every node passed.
local created, existing = {}, {}
for i = 1, count do
  local o = (i - 1) * WIDTH
  local job_key = job_hash_key(queue_prefix(ARGV[o + 1]), ARGV[o + 2])
  if redis.call("EXISTS", job_key) == 1 then
    if child_conflicts(job_key, ARGV[o + 10]) then
      return {-7, i}
    end
    existing[i] = true
  else
    created[job_key] = true
  end
end
for i = 1, count do
  local parent_key = ARGV[(i - 1) * WIDTH + 10]
  if parent_key ~= "" and not created[parent_key]
      and redis.call("EXISTS", parent_key) == 0 then
    return {-5, i}
  end
end

-- Writes.
local queues = {} -- prefix -> {keys, max_len, blocked}
local function queue_of(prefix)
  local entry = queues[prefix]
  if not entry then
    local keys = queue_keys_for(q, prefix)
    entry = { keys = keys, max_len = max_events(keys.meta) }
    queues[prefix] = entry
  end
  return entry
end

local ids, parents, parent_order = {}, {}, {}
for i = 1, count do
  local o = (i - 1) * WIDTH
  local entry = queue_of(queue_prefix(ARGV[o + 1]))
  local nq = entry.keys
  local job_id, ts = ARGV[o + 2], ARGV[o + 4]
  local job_key = job_hash_key(nq.prefix, job_id)
  local parent_key, parent_json = ARGV[o + 10], ARGV[o + 11]
  redis.call("INCR", nq.id)
  ids[i] = job_id
  if parent_key ~= "" and not parents[parent_key] then
    parents[parent_key] = parent_json
    parent_order[#parent_order + 1] = parent_key
  end
  if existing[i] then
    if parent_key ~= "" then
      attach_existing_child(nq, job_id, job_key, parent_key, parent_json)
    end
    redis.call("XADD", nq.events, "MAXLEN", "~", entry.max_len, "*", "event", "duplicated",
      "jobId", job_id)
  else
    local owner, dedup_id = nil, nil
    if ARGV[o + 13] ~= "" then
      local spec = cjson.decode(ARGV[o + 13])
      owner = deduplicate(nq, spec, job_id, ARGV[o + 3], ARGV[o + 5], ARGV[o + 6],
        entry.max_len)
      dedup_id = spec.id
    end
    if owner then
      ids[i] = { owner }
    else
      local delay_arg, priority_arg = ARGV[o + 7], ARGV[o + 8]
      if parent_key ~= "" then
        redis.call("HSET", job_key, "name", ARGV[o + 3], "data", ARGV[o + 5],
          "opts", ARGV[o + 6], "timestamp", ts, "delay", delay_arg, "priority", priority_arg,
          "parentKey", parent_key, "parent", parent_json)
      elseif dedup_id then
        redis.call("HSET", job_key, "name", ARGV[o + 3], "data", ARGV[o + 5],
          "opts", ARGV[o + 6], "timestamp", ts, "delay", delay_arg, "priority", priority_arg,
          "deid", dedup_id)
      else
        redis.call("HSET", job_key, "name", ARGV[o + 3], "data", ARGV[o + 5],
          "opts", ARGV[o + 6], "timestamp", ts, "delay", delay_arg, "priority", priority_arg)
      end
      local gid = ARGV[o + 14] ~= "" and ARGV[o + 14] or nil
      if gid then
        redis.call("HSET", job_key, "gid", gid)
      end
      redis.call("XADD", nq.events, "*", "event", "added", "jobId", job_id, "name", ARGV[o + 3])
      if ARGV[o + 12] == "1" then
        redis.call("ZADD", nq.waiting_children, ts, job_id)
        redis.call("XADD", nq.events, "MAXLEN", "~", entry.max_len, "*",
          "event", "waiting-children", "jobId", job_id)
      else
        local delay = tonumber(delay_arg)
        entry.blocked = enqueue_job(nq, job_id, delay, tonumber(ts) + delay,
          tonumber(priority_arg), ARGV[o + 9] == "1", entry.max_len, entry.blocked, gid)
      end
      if parent_key ~= "" then
        redis.call("SADD", job_part_key(parent_key, "dependencies"), job_key)
      end
    end
  end
end

-- A parent all of whose children already existed and completed can run at once.
local now = tonumber(ARGV[4])
for _, parent_key in ipairs(parent_order) do
  release_if_no_pending(q, parent_key, parents[parent_key], now)
end
return ids
