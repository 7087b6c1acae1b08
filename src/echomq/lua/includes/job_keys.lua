-- Deleting a job's own keys (CORE.md 2.3): the hash and its :logs, :dependencies, :processed,
-- :failed and :unsuccessful keys. The :lock key is left to expire.
local function delete_job_keys(job_key)
  redis.call("DEL", job_key, job_key .. ":logs", job_key .. ":dependencies",
    job_key .. ":processed", job_key .. ":failed", job_key .. ":unsuccessful")
end
