--[[
  countGroupDelayed: count one group's delayed jobs in a page of `groups:delayed`, read only
  (docs/protocol/scripts.md#script-countGroupDelayed, docs/protocol/groups.md#groups-admin).
  `groups:delayed` holds every group's delayed jobs; a job's group is its hash's `gid`.

  KEYS[1] prefix "P:Q:": the group keys and job keys are built from it (includes/job_keys.lua)

  ARGV[1] group id
  ARGV[2] cursor: the score the previous page ended at (this page starts above it), or "" to
          start at the lowest
  ARGV[3] page size (> 0)

  Returns: {count, cursor}: how many jobs of the page (and of its last score's ties) belong to
  the group, and the cursor to call again with; "" when the page was the last.
  Errors: none.
]]
--@include "job_keys"

local g = group_keys(KEYS[1])
local gid, after, size = ARGV[1], ARGV[2], tonumber(ARGV[3])
local low = "-inf"
if after ~= "" then
  low = string.format("(%s", after)
end

local function in_group(id)
  return redis.call("HGET", job_hash_key(g.prefix, id), "gid") == gid
end

local page = redis.call("ZRANGEBYSCORE", g.delayed, low, "+inf", "WITHSCORES", "LIMIT", 0, size)
local count = 0
for i = 1, #page, 2 do
  if in_group(page[i]) then
    count = count + 1
  end
end
if #page < 2 * size then
  return {count, ""}
end
-- Scores are unique but for more than 4096 jobs due in one ms: count the page's last score
-- whole, so the next page may start above it.
local last = page[#page]
local seen = {}
for i = 1, #page, 2 do
  if page[i + 1] == last then
    seen[page[i]] = true
  end
end
for _, id in ipairs(redis.call("ZRANGEBYSCORE", g.delayed, last, last)) do
  if not seen[id] and in_group(id) then
    count = count + 1
  end
end
return {count, last}
