-- Locks found by the token they hold (docs/protocol/markers-locks-stalled.md#renewal). Needs
-- "job_keys".

-- The jobs of `active` and, when the queue has groups, of the groups' active list
-- `grouped_active` (else nil) whose lock holds one of `tokens` (a set: token -> true), as
-- {{id, token}, ...}. O(jobs in those lists), one GET each: only for the rare calls that know
-- a call's tokens but not the jobs it took (a fetch resent after its reply was lost; a fetch
-- whose reply a blocked worker has not read yet).
local function jobs_locked_by(prefix, active, grouped_active, tokens)
  local found = {}
  for _, list in ipairs({active, grouped_active}) do
    for _, id in ipairs(redis.call("LRANGE", list, 0, -1)) do
      local token = redis.call("GET", job_part_key(job_hash_key(prefix, id), "lock"))
      if token and tokens[token] then
        found[#found + 1] = {id, token}
      end
    end
  end
  return found
end
