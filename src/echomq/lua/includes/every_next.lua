-- The every-scheduler rule for the run after an iteration (docs/protocol/flows-dedup-schedulers.md).

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
