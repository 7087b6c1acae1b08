-- Deleting a job's own keys (docs/protocol/keys.md#delete-job-keys): the hash and its :logs,
-- :dependencies, :processed, :failed and :unsuccessful keys. The :lock key is left to expire.
local function delete_job_keys(job_key)
  redis.call("DEL", job_key, job_key .. ":logs", job_key .. ":dependencies",
    job_key .. ":processed", job_key .. ":failed", job_key .. ":unsuccessful")
end
