-- The every-scheduler rules: the run after an iteration, and the run an upsert sets
-- (docs/protocol/flows-dedup-schedulers.md).

-- The next run (ms) after the iteration due at `prev`: one interval on or, when runs were missed
-- (that is already past `now`), the next slot on the `every` grid shifted by `offset` after `now`.
local function every_after(prev, every, offset, now)
  local next_ms = prev + every
  if next_ms < now then
    local aligned = math.floor(now / every) * every + offset
    if aligned <= now then
      next_ms = aligned + every
    else
      next_ms = aligned
    end
  end
  return next_ms
end

-- An every-scheduler's next run (ms) and the offset to store, for an upsert: `prev` is its
-- pending iteration's time, nil for a new scheduler (or one whose interval changed); `offset`
-- the stored one (0 when none); `start` its startDate or nil. A new scheduler runs at its
-- start, else on the grid shifted by a positive offset, else now; a stored offset of 0 becomes
-- the phase of the run within the interval.
local function every_next(prev, every, offset, now, start)
  local next_ms
  if prev ~= nil then
    next_ms = every_after(prev, every, offset, now)
  elseif start then
    next_ms = math.max(start, now)
  elseif offset > 0 then
    next_ms = math.floor(now / every) * every + offset
    if next_ms <= now then
      next_ms = next_ms + every
    end
  else
    next_ms = now
  end
  next_ms = math.floor(next_ms)
  if offset == 0 then
    offset = next_ms - math.floor(next_ms / every) * every
  end
  return next_ms, offset
end
