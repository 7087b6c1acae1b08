-- Placing a job that was just stored, as an add does
-- (docs/protocol/scripts.md#step-enqueue). Needs "common" and "job_keys".
--@include "groups"

-- delay > 0: `delayed`, due at `due` ms (`delayed` event, delay marker); else priority > 0:
-- `prioritized`, else `wait` (LPUSH, RPUSH with lifo), the base marker unless the queue is
-- paused or maxed, and a `waiting` event, all in the queue whose keys are `q` (delayed, events,
-- marker, prioritized, pc, wait, meta, active). `blocked` caches that paused-or-maxed answer
-- across several jobs of one call: pass nil to look it up; the (possibly new) value is returned.
-- A grouped job (`gid` not nil) goes to its group instead of `wait` / `prioritized`, or to the
-- grouped `delayed` (docs/protocol/groups.md), with the same events and markers.
local function enqueue_job(q, job_id, delay, due, priority, lifo, max_len, blocked, gid)
  local g = gid and group_keys(q.prefix)
  if delay > 0 then
    if g then
      group_delay(g, q.marker, job_id, due)
    else
      redis.call("ZADD", q.delayed, score_str(delayed_score(q.delayed, due)), job_id)
    end
    redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "delayed",
      "jobId", job_id, "delay", int_str(due))
    if not g then
      refresh_delay_marker(q.marker, q.delayed)
    end
    return blocked
  end
  if g then
    group_place(g, job_id, gid, priority, lifo, due)
  elseif priority > 0 then
    add_prioritized(q.prioritized, q.pc, priority, job_id)
  elseif lifo then
    redis.call("RPUSH", q.wait, job_id)
  else
    redis.call("LPUSH", q.wait, job_id)
  end
  if blocked == nil then
    blocked = paused_or_maxed(q.meta, q.active)
  end
  if not blocked then
    add_base_marker(q.marker)
  end
  redis.call("XADD", q.events, "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", job_id)
  return blocked
end
