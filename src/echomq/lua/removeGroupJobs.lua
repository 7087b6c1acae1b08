--[[
  removeGroupJobs: hard-remove one group's waiting jobs, at most a budget per call
  (docs/protocol/scripts.md#script-removeGroupJobs). Active, delayed and finished jobs of the
  group stay, and so do the current iterations of job schedulers (as drain keeps them).

  KEYS[1] prefix "P:Q:": job keys, dedup keys and the group keys are built from it
          (includes/job_keys.lua); a parent in another queue has its keys derived from its job
          reference
  KEYS[2] repeat
  KEYS[3] waiting-children (a parent in this queue released by a removed child leaves it)

  ARGV[1] group id
  ARGV[2] budget: the most jobs removed by this call (> 0)

  Returns: {removed, more}: how many jobs this call removed, and 1 when the budget was used up
  (call again), else 0.
  Errors: none.

  Per job, in the order the group would run them: out of `groups:wait:<gid>` (then
  `groups:prioritized:<gid>`) and `groups:waiting`, the group's count in `groups` down by one
  (the group leaves `groups` once it has neither waiting nor active jobs), then the hard removal
  drain does (parent rule, dedup key, job keys). No events; the group's place in the rotation
  is left to the next fetch, which finds it empty and drops it.
]]
--@include "remove_job"
--@include "groups"

local q = {prefix = KEYS[1], ["repeat"] = KEYS[2], waiting_children = KEYS[3]}
local g = group_keys(q.prefix)
local gid = ARGV[1]
local budget = tonumber(ARGV[2])
local removed = group_remove_waiting(q, g, gid, scheduler_iterations(q["repeat"]), budget)
if removed >= budget then
  return {removed, 1}
end
return {removed, 0}
