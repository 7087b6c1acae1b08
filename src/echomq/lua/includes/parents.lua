-- Parent/child helpers (docs/protocol/flows-dedup-schedulers.md#flows). A child names its
-- parent by the full key "P':Q':<parentId>", possibly in another queue; every parent-side key
-- is derived from it.
--@include "common"
--@include "job_keys"
--@include "groups"

-- Put a released parent at the front of the `wait` of its queue `pq` (a table from
-- queue_keys_for), ignoring its priority and delay, and wake that queue's workers unless it is
-- paused or maxed; a grouped parent at the front of its group.
local function push_parent_to_wait(pq, parent_id)
  local f = redis.call("HMGET", job_hash_key(pq.prefix, parent_id), "gid", "timestamp")
  if f[1] then
    group_place(group_keys(pq.prefix), parent_id, f[1], 0, true, tonumber(f[2]) or 0)
  else
    redis.call("RPUSH", pq.wait, parent_id)
  end
  if not paused_or_maxed(pq.meta, pq.active) then
    add_base_marker(pq.marker)
  end
end

-- Make a finished child pending again in its live parent (a retried child,
-- docs/protocol/flows-dedup-schedulers.md#child-retry):
-- drop it from the parent's :processed (completed) or :failed/:unsuccessful (failed) and, if it
-- was there, SADD it back to :dependencies.
local function reattach_child(job_key, prev_state)
  local parent_key = redis.call("HGET", job_key, "parentKey")
  if not parent_key or redis.call("EXISTS", parent_key) == 0 then
    return
  end
  local found = 0
  if prev_state == "completed" then
    found = redis.call("HDEL", job_part_key(parent_key, "processed"), job_key)
  elseif prev_state == "failed" then
    found = redis.call("ZREM", job_part_key(parent_key, "unsuccessful"), job_key)
      + redis.call("HDEL", job_part_key(parent_key, "failed"), job_key)
  end
  if found > 0 then
    redis.call("SADD", job_part_key(parent_key, "dependencies"), job_key)
  end
end
