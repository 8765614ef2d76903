-- stv2_reap(session_key; process, error, expired_at_ms): the worker process's lease expired at `expired_at_ms`.
-- Its running tasks begun before then fail with `error`, its cancelled ones become finished. Returns how many it
-- finished.
local function st_reap(keys, args)
  local session_key = keys[1]
  -- A session whose hash is gone (evicted) is lost, not for the reaper: its leftovers are the sweep's.
  if not stored_inc then return 0 end
  local base = base_of(session_key)
  local process, error, expired_at = args[1], args[2], tonumber(args[3])
  local reaped = 0
  local at = now()
  for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
    local key = task_key(base, task_id)
    local run, since = unfinished_run_of(key, process)
    -- A run begun after the lease expired is the work of a worker that came back: not the lost one's.
    if run and since < expired_at then
      end_lost_run(base, key, task_id, run, error, at)
      reaped = reaped + 1
    end
  end
  return reaped
end

register('reap', session_function(st_reap))
