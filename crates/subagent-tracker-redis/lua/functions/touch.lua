-- stv2_touch(session_key; max_finished, max_age_us, early_ttl_us, log_size): makes the session exist, with its
-- bound, how long (in microseconds) a finished run is kept if max_age_us is not "", how long a cancel waits for its
-- task's start, and how many progress reports each task keeps, unless it does. A closed
-- session whose tasks are all finished has left: its keys go, and its id names a new incarnation, whose run
-- numbers start past the old one's. Returns what `stv2_session` does.
local function st_touch(keys, args)
  local session_key = keys[1]
  local state = session_state(session_key)
  local after = 0
  if state[2] == '1' and state[3] == '0' then
    after = tonumber(redis.call('HGET', session_key, 'seq'))
    remove_session(base_of(session_key), session_key)
    state = {}
  end
  if not state[1] then
    local inc = digits(math.max(now_ms() * 1000, after + 1))
    redis.call('HSET', session_key, 'inc', inc, 'seq', inc, 'max', args[1])
    if args[2] and args[2] ~= '' then redis.call('HSET', session_key, 'max_age', args[2]) end
    if args[3] and args[3] ~= '' then redis.call('HSET', session_key, 'early_ttl', args[3]) end
    if args[4] and args[4] ~= '' then redis.call('HSET', session_key, 'log_size', args[4]) end
  end
  touch()
  return session_state(session_key)
end

register('touch', session_function(st_touch))
