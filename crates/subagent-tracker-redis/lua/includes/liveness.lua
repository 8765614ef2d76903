-- The task's current run if it is unfinished and the worker process runs it, with when the process began it (its
-- claim, or its start), in milliseconds; nil otherwise.
local function unfinished_run_of(key, process)
  local state = fields(key, 'run', 'fin', 'worker', 'started_at', 'claimed_at')
  local run, finished, owner, started_at, claimed_at = state[1], state[2], state[3], state[4], state[5]
  if not run or finished == '1' or owner ~= process then return nil end
  return run, tonumber(claimed_at or started_at or '0') * 1000
end

-- Ends a run whose runner is gone: a running or paused one fails with `error`, a cancelled one finishes, and no
-- cancel handler of its process will report any more.
local function end_lost_run(base, key, task_id, run, error, at)
  redis.call('HDEL', key, 'handling')
  if PENDING[redis.call('HGET', key, 'status')] then
    redis.call('HSET', key, 'status', 'failed', 'error', error)
    settle_group(base, key, task_id, run, 'failed', at)
  end
  finish(base, key, task_id, run, at)
end
