-- Key names built inside a script: the one place a script concatenates a key
-- (docs/protocol/keys.md#key-composition).
--
-- Every key of the script's own queue (wait, active, meta, events, ...) comes in KEYS, built by
-- protocol/keys.py, and so does the queue's prefix key "P:Q:", which carries its hash tag.
-- Scripts hold their queue's keys in a table `q` (q.prefix, q.wait, q.waiting_children, ...).
-- Only keys named by data read or received at run time are built, always by appending to a
-- prefix key, so they land in the prefix's Redis Cluster slot:
--   job keys          "P:Q:<id>" and "P:Q:<id>:<part>" (lock, logs, dependencies, processed,
--                     failed, unsuccessful);
--   dedup keys        "P:Q:de:<dedupId>" and "P:Q:dn:<dedupId>" (one pair per deduplication id);
--   scheduler hashes  "P:Q:repeat:<schedulerId>";
--   another queue's keys, when a job reference names a queue other than the script's own (a
--                     parent in a flow, or a child removeJob removes): queue_keys_for.

local function job_hash_key(prefix, job_id)
  return prefix .. job_id
end

-- part: "lock", "logs", "dependencies", "processed", "failed" or "unsuccessful".
local function job_part_key(job_hash, part)
  return job_hash .. ":" .. part
end

local function dedup_key(prefix, dedup_id)
  return prefix .. "de:" .. dedup_id
end

-- Where the add that arrived while the deduplicated job was active waits (keepLastIfActive).
local function dedup_next_key(prefix, dedup_id)
  return prefix .. "dn:" .. dedup_id
end

local function scheduler_hash_key(prefix, scheduler_id)
  return prefix .. "repeat:" .. scheduler_id
end

-- The id of a scheduler's iteration due at `millis`: "repeat:<schedulerId>:<millis>".
local function iteration_id(scheduler_id, millis)
  return "repeat:" .. scheduler_id .. ":" .. string.format("%.0f", tonumber(millis))
end

-- The id (text after the last ':') and the prefix "P:Q:" of a full job key.
local function split_job_key(job_hash)
  local job_id = string.match(job_hash, "([^:]*)$")
  return job_id, string.sub(job_hash, 1, #job_hash - #job_id)
end

-- The prefix "P:Q:" of the queue whose qualified name ("queueKey" of a parent reference) is
-- "P:Q".
local function queue_prefix(queue_key)
  return queue_key .. ":"
end

-- The keys of the queue whose prefix is `prefix`, as a table shaped like `q`: `q` itself when
-- it is the script's own queue (declared keys), else derived (a flow across queues, whose
-- queues must share a hash tag on Redis Cluster). Built only when called: the hot paths never
-- pay for it.
local function queue_keys_for(q, prefix)
  if prefix == q.prefix then
    return q
  end
  return {
    prefix = prefix, wait = prefix .. "wait", paused = prefix .. "paused",
    active = prefix .. "active", prioritized = prefix .. "prioritized", pc = prefix .. "pc",
    delayed = prefix .. "delayed", completed = prefix .. "completed",
    failed = prefix .. "failed", waiting_children = prefix .. "waiting-children",
    meta = prefix .. "meta", events = prefix .. "events", marker = prefix .. "marker",
    id = prefix .. "id",
  }
end

-- echomq's groups (docs/protocol/groups.md): every group key is under "P:Q:groups" and built
-- here from the prefix key, the fixed ones too, so any script that may meet a grouped job finds
-- them without more KEYS (they land in the prefix's Cluster slot, as job keys do). Per group:
-- "P:Q:groups:wait:<gid>" and "P:Q:groups:prioritized:<gid>" (its waiting jobs without and with
-- a priority), "P:Q:groups:run:<gid>" (its counter) and "P:Q:groups:limit:<gid>" (its rate
-- window).
local function group_keys(prefix)
  local base = prefix .. "groups"
  return {
    prefix = prefix, index = base, ready = base .. ":ready", active = base .. ":active",
    stalled = base .. ":stalled", delayed = base .. ":delayed", waiting = base .. ":waiting",
    state = base .. ":state", limited = base .. ":limited",
    taken = {}, -- jobs a fetch took, written at its end (includes/groups.lua, group_flush_taken)
  }
end

local function group_wait_key(prefix, gid)
  return prefix .. "groups:wait:" .. gid
end

local function group_prio_key(prefix, gid)
  return prefix .. "groups:prioritized:" .. gid
end

-- A group's "2 * its active jobs + 1 while it is in the rotation" (a counter of its own, so
-- that it costs the same whatever the number of groups: as fields of one hash it would be
-- read in a listpack of up to hash-max-listpack-entries fields).
local function group_run_key(prefix, gid)
  return prefix .. "groups:run:" .. gid
end

local function group_limit_key(prefix, gid)
  return prefix .. "groups:limit:" .. gid
end

-- Deleting a job's own keys (docs/protocol/keys.md#delete-job-keys): the hash and its :logs,
-- :dependencies, :processed, :failed and :unsuccessful keys. The :lock key is left to expire.
local function delete_job_keys(job_hash)
  redis.call("DEL", job_hash, job_part_key(job_hash, "logs"),
    job_part_key(job_hash, "dependencies"), job_part_key(job_hash, "processed"),
    job_part_key(job_hash, "failed"), job_part_key(job_hash, "unsuccessful"))
end
