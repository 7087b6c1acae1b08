-- Putting a job back among the ready jobs (retry of a finished job, promote, change of
-- priority). Needs "common".

-- Priority 0 goes to `wait` with push_cmd ("LPUSH" = back of the line, "RPUSH" = served next);
-- any other priority gets a fresh counter score in `prioritized`. The base marker is written
-- unless the caller found the queue paused or maxed (`blocked`).
local function requeue_ready(k_wait, k_prioritized, k_pc, k_marker, blocked, priority, job_id,
                             push_cmd)
  if priority == 0 then
    redis.call(push_cmd, k_wait, job_id)
  else
    add_prioritized(k_prioritized, k_pc, priority, job_id)
  end
  if not blocked then
    add_base_marker(k_marker)
  end
end
