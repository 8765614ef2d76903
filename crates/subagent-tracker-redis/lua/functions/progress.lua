-- stv2_progress(session_key; inc, task_id, run, message): records a progress message on an unfinished run.
local function st_progress(keys, args)
  if not same_incarnation(args[1]) then return 0 end
  local base = base_of(keys[1])
  local key = task_key(base, args[2])
  local state = fields(key, 'run', 'fin', 'status', 'progress_count')
  if state[1] ~= args[3] or state[2] == '1' then return 0 end
  touch(keys[1])
  redis.call('HSET', key, 'progress', args[4], 'progress_count', digits((tonumber(state[4]) or 0) + 1))
  emit(base, args[2], 'progress', state[3], now(), 'message', args[4])
  return 1
end

register('progress', session_function(st_progress))
