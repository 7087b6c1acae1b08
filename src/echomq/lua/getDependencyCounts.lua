--[[
  getDependencyCounts: how many children of a job are in each flow structure, read at one
  moment (docs/protocol/scripts.md#script-getDependencyCounts).

  KEYS[1] prefix "P:Q:": the job's :processed, :dependencies, :failed and :unsuccessful keys are
          built from it (includes/job_keys.lua)

  ARGV[1] job id
  ARGV[2..] parts: "processed" (HLEN :processed), "unprocessed" (SCARD :dependencies),
            "ignored" (HLEN :failed) or "failed" (ZCARD :unsuccessful)

  Returns: one count per part, in ARGV order (0 for a missing key or job).
  Errors: none.
]]
--@include "job_keys"

local job_key = job_hash_key(KEYS[1], ARGV[1])
local counts = {}
for i = 2, #ARGV do
  local part = ARGV[i]
  if part == "processed" then
    counts[#counts + 1] = redis.call("HLEN", job_part_key(job_key, "processed"))
  elseif part == "unprocessed" then
    counts[#counts + 1] = redis.call("SCARD", job_part_key(job_key, "dependencies"))
  elseif part == "ignored" then
    counts[#counts + 1] = redis.call("HLEN", job_part_key(job_key, "failed"))
  else
    counts[#counts + 1] = redis.call("ZCARD", job_part_key(job_key, "unsuccessful"))
  end
end
return counts
