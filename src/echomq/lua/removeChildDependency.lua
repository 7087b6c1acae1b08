--[[
  removeChildDependency: a pending child stops being a dependency of its parent, which no longer
  waits for it (docs/protocol/scripts.md#script-removeChildDependency). The child itself stays
  where it is, without a parent.

  KEYS[1] prefix "P:Q:": the child's key is built from it (includes/job_keys.lua); a parent in
          another queue has its keys derived from the child's parentKey
  KEYS[2] waiting-children
  KEYS[3] wait
  KEYS[4] meta
  KEYS[5] active
  KEYS[6] marker
  KEYS[7] events

  ARGV[1] child job id

  Returns: 0 removed (soft parent rule applied; the child's parentKey and parent fields deleted);
  1 the child is not a pending child of its parent (it already finished, or failed with a
  failure option), nothing written; 2 the child has no parentKey.
  Errors: -1 child job missing, -5 parent job missing.
]]
--@include "remove_job"

local q = {
  prefix = KEYS[1], waiting_children = KEYS[2], wait = KEYS[3], meta = KEYS[4], active = KEYS[5],
  marker = KEYS[6], events = KEYS[7],
}
local job_key = job_hash_key(q.prefix, ARGV[1])

if redis.call("EXISTS", job_key) == 0 then
  return -1
end
local parent_key = redis.call("HGET", job_key, "parentKey")
if not parent_key then
  return 2
end
if redis.call("EXISTS", parent_key) == 0 then
  return -5
end
if redis.call("SISMEMBER", job_part_key(parent_key, "dependencies"), job_key) == 0 then
  return 1
end
unlink_from_parent(q, parent_key, job_key, false)
redis.call("HDEL", job_key, "parentKey", "parent")
return 0
