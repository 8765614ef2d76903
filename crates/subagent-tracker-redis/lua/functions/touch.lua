-- stv2_touch(session_key; max_finished, max_age_us, early_ttl_us, log_size): makes the session exist, with its
-- bound, how long (in microseconds) a finished run is kept if max_age_us is not "", how long a cancel waits for its
-- task's start, and how many progress reports each task keeps, unless it does. A closed session whose tasks are
-- all finished has left: its keys go, and its id names a new incarnation, whose run numbers start past the old
-- one's. So do the keys left behind by a session whose hash was lost. The old keys go in steps (`begin_removal`):
-- while they do, it returns {"removing"}, and is called again. Returns what `stv2_session` does.
-- Includes: clock, session, session_state, register.
local function st_touch(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  local state = session_state(session_key)
  local after = 0
  local removing = redis.call('HEXISTS', session_key, 'removing') == 1
  -- What a session whose hash was lost left behind (its sweep may have begun, with no hash to say so) goes too.
  local left_behind = not removing and not state[1]
    and redis.call('EXISTS', base .. KEY.live, base .. KEY.finished) > 0
  if left_behind or not removing and state[2] == '1' and state[3] == '0' then
    begin_removal(base, session_key)
    removing = true
  end
  if removing then
    if not remove_session_step(base) then return { 'removing' } end
    after = tonumber(redis.call('HGET', session_key, 'seq') or '0')
    redis.call('DEL', session_key)
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
