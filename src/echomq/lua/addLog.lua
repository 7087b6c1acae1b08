--[[
  addLog: append a line to a job's log (docs/protocol/scripts.md#script-addLog).

  KEYS[1] job hash
  KEYS[2] the job's log list "<job key>:logs"

  ARGV[1] the line
  ARGV[2] how many lines to keep (the job's `kl`), or "" to keep all

  Returns: the number of lines the log now holds.
  Errors: -1 the job does not exist.
]]

if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
local count = redis.call("RPUSH", KEYS[2], ARGV[1])
local keep = tonumber(ARGV[2])
if keep and keep > 0 and count > keep then
  redis.call("LTRIM", KEYS[2], -keep, -1)
  return keep
end
return count
