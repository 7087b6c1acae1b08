--[[
  changePriority: set a job's priority, moving it between `wait` and `prioritized` when it is
  waiting (docs/protocol/scripts.md#script-changePriority).

  KEYS[1] job hash
  KEYS[2] wait
  KEYS[3] meta
  KEYS[4] prioritized
  KEYS[5] active
  KEYS[6] pc
  KEYS[7] marker

  ARGV[1] job id
  ARGV[2] the new priority (0 .. 2^21-1)
  ARGV[3] "1" for lifo, else "0"

  Returns: 0.
  Errors: -1 the job does not exist.

  A waiting job is re-added: priority 0 to `wait` (RPUSH with lifo, else LPUSH); with lifo and
  a priority, to the front of its band (score priority*2^32, no marker); else with a fresh
  counter score. The `priority` field is always written (a delayed job uses it when promoted);
  `opts.priority` is left as it was. A grouped job waiting in its group
  (docs/protocol/groups.md) is re-scored there instead: at the back of its new priority, or
  with lifo at its front (the group keys are built from the prefix, KEYS[1] less the job id).
]]
--@include "common"
--@include "requeue"
--@include "groups_admin"

local job_key = KEYS[1]
local job_id = ARGV[1]
local priority = tonumber(ARGV[2])
local lifo = ARGV[3] == "1"
if redis.call("EXISTS", job_key) == 0 then
  return -1
end

if redis.call("ZREM", KEYS[4], job_id) > 0 or redis.call("LREM", KEYS[2], -1, job_id) > 0 then
  if priority > 0 and lifo then
    redis.call("ZADD", KEYS[4], score_str(priority * 4294967296), job_id)
  else
    local push_cmd = "LPUSH"
    if lifo then
      push_cmd = "RPUSH"
    end
    requeue_ready(KEYS[2], KEYS[4], KEYS[6], KEYS[7], paused_or_maxed(KEYS[3], KEYS[5]),
      priority, job_id, push_cmd)
  end
else
  local gid = job_group(job_key)
  if gid then
    group_rescore(group_keys(prefix_of(job_key, job_id)), gid, job_id, priority, lifo)
  end
end
redis.call("HSET", job_key, "priority", ARGV[2])
return 0
