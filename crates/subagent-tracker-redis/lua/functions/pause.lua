-- stv2_pause(session_key; inc, task_id, run[, reason]): the runner pauses its running run (contract §5, pause and
-- resume): status "paused", which is pending, so cancels, deadlines and the reaper reach it as a running run. The
-- reason, when given, is kept as `pause_reason` until the resume. Returns the run's number of pauses so far (its
-- `pauses` field, which numbers this one), or 0 when the run is not running or is no longer the task's current
-- one. Rust: RedisTaskHandle::pause.
-- Includes: clock, session, keys, tasks, events, register.
local function st_pause(keys, args)
  if not same_incarnation(args[1]) then return 0 end
  local base = base_of(keys[1])
  local key = task_key(base, args[2])
  local state = fields(key, 'run', 'status', 'fin')
  if state[1] ~= args[3] or state[2] ~= 'running' or state[3] == '1' then return 0 end
  touch()
  local reason = args[4]
  local number = redis.call('HINCRBY', key, 'pauses', 1)
  if reason then
    redis.call('HSET', key, 'status', 'paused', 'pause_reason', reason)
    emit(base, args[2], 'paused', 'paused', now(), 'reason', reason)
  else
    redis.call('HSET', key, 'status', 'paused')
    emit(base, args[2], 'paused', 'paused', now())
  end
  return number
end

register('pause', session_function(st_pause))
