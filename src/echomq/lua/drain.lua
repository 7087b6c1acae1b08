--[[
  drain: hard-remove the jobs waiting to run (docs/protocol/scripts.md#script-drain), at most a
  budget of jobs per call. Exactly the ids that are not a scheduler's current iteration are removed,
  wherever they sit in the list (BullMQ's head-trimming bug is not reproduced); kept ids stay
  in their relative order.

  KEYS[1] prefix "P:Q:": job keys and dedup keys are built from it (includes/job_keys.lua);
          a parent in another queue has its keys derived from its job reference
  KEYS[2] wait
  KEYS[3] paused (legacy list)
  KEYS[4] delayed
  KEYS[5] prioritized
  KEYS[6] repeat
  KEYS[7] waiting-children (a parent in this queue released by a removed child leaves it)

  ARGV[1] "1" to drain `delayed` too, else "0"
  ARGV[2] budget: the most jobs removed by this call (> 0)

  Returns: 1 the budget was used up (call again), 0 done.

  Order: wait, paused, delayed (if asked), prioritized, then the grouped jobs
  (docs/protocol/groups.md): the waiting ones, group by group (the group of the oldest in
  groups:waiting first, its jobs in the order it runs them, each leaving its group) and, if
  asked, groups:delayed. Hard parent rule per job, dedup keys released. No
  events; `marker` and `pc` are left as they are. The call that finishes the drain takes the
  groups left with no waiting job out of the rotation (groups:ready).
]]
--@include "remove_job"

local q = {
  prefix = KEYS[1], wait = KEYS[2], paused = KEYS[3], delayed = KEYS[4], prioritized = KEYS[5],
  ["repeat"] = KEYS[6], waiting_children = KEYS[7],
}
local budget = tonumber(ARGV[2])
local kept, kept_count = scheduler_iterations(q["repeat"])

-- Number of kept ids at the tail of a list (they have all been looked at already).
local function kept_tail(key)
  local n = 0
  while true do
    local id = redis.call("LINDEX", key, -(n + 1))
    if not id or not kept[id] then
      return n
    end
    n = n + 1
  end
end

-- Cut a tail segment holding up to `budget` removable ids, delete those jobs and push the kept
-- ids of the segment back in order. Repeats until the list holds only kept ids or the budget
-- is spent.
local function drain_list(key)
  while budget > 0 do
    local tail = kept_tail(key)
    if redis.call("LLEN", key) <= tail then
      return
    end
    local segment = redis.call("LRANGE", key, -(tail + budget), -1)
    redis.call("LTRIM", key, 0, -(#segment + 1))
    local keep = {}
    for _, id in ipairs(segment) do
      if kept[id] then
        keep[#keep + 1] = id
      else
        hard_remove_job(q, id)
        budget = budget - 1
      end
    end
    if #keep > 0 then
      redis.call("RPUSH", key, unpack(keep))
    end
  end
end

local function drain_zset(key)
  while budget > 0 do
    local ids = redis.call("ZRANGE", key, 0, budget + kept_count - 1)
    local victims = {}
    for _, id in ipairs(ids) do
      if not kept[id] and #victims < budget then
        victims[#victims + 1] = id
      end
    end
    if #victims == 0 then
      return
    end
    zrem_ids(key, victims)
    for _, id in ipairs(victims) do
      hard_remove_job(q, id)
    end
    budget = budget - #victims
  end
end

local g = group_keys(q.prefix)

-- The grouped waiting jobs: the oldest one's group first, all of it in the order it runs them
-- (group_remove_waiting: O(1) a job, where taking the oldest job out of a LIST of lifo jobs
-- would read the whole LIST), then the next oldest's; kept ids stay.
local function drain_grouped_waiting()
  while budget > 0 do
    local ids = redis.call("ZRANGE", g.waiting, 0, budget + kept_count - 1)
    local victims = {}
    for _, id in ipairs(ids) do
      if not kept[id] and #victims < budget then
        victims[#victims + 1] = id
      end
    end
    if #victims == 0 then
      return
    end
    for _, id in ipairs(victims) do
      if budget <= 0 then
        return
      end
      local gid = job_group(job_hash_key(q.prefix, id)) -- (nil when its hash is gone)
      if gid then
        budget = budget - group_remove_waiting(q, g, gid, kept, budget)
        if budget <= 0 then -- (its group may not be done: the next call goes on)
          return
        end
      end
      if redis.call("ZSCORE", g.waiting, id) then -- its hash gone, or not in its group
        redis.call("ZREM", g.waiting, id)
        hard_remove_job(q, id)
        budget = budget - 1
      end
    end
  end
end

drain_list(q.wait)
drain_list(q.paused)
if ARGV[1] == "1" then
  drain_zset(q.delayed)
end
drain_zset(q.prioritized)
drain_grouped_waiting()
if ARGV[1] == "1" then
  drain_zset(g.delayed)
end
if budget <= 0 then
  return 1
end
if redis.call("EXISTS", g.ready) == 1 then
  group_tidy_rotation(g)
end
return 0
