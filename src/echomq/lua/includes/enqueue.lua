-- Placing a job that was just stored, as an add does
-- (docs/protocol/scripts.md#step-enqueue). Needs "common".

-- delay > 0: `delayed`, due at `due` ms (`delayed` event, delay marker); else priority > 0:
-- `prioritized`, else `wait` (LPUSH, RPUSH with lifo), the base marker unless the queue is
-- paused or maxed, and a `waiting` event. `blocked` caches that paused-or-maxed answer across
-- several jobs of one call: pass nil to look it up; the (possibly new) value is returned.
local function enqueue_job(base, job_id, delay, due, priority, lifo, max_len, blocked)
  local k_events = base .. "events"
  if delay > 0 then
    local k_delayed = base .. "delayed"
    redis.call("ZADD", k_delayed, score_str(delayed_score(k_delayed, due)), job_id)
    redis.call("XADD", k_events, "MAXLEN", "~", max_len, "*", "event", "delayed",
      "jobId", job_id, "delay", int_str(due))
    refresh_delay_marker(base .. "marker", k_delayed)
    return blocked
  end
  if priority > 0 then
    add_prioritized(base .. "prioritized", base .. "pc", priority, job_id)
  elseif lifo then
    redis.call("RPUSH", base .. "wait", job_id)
  else
    redis.call("LPUSH", base .. "wait", job_id)
  end
  if blocked == nil then
    blocked = paused_or_maxed(base .. "meta", base .. "active")
  end
  if not blocked then
    add_base_marker(base .. "marker")
  end
  redis.call("XADD", k_events, "MAXLEN", "~", max_len, "*", "event", "waiting", "jobId", job_id)
  return blocked
end
