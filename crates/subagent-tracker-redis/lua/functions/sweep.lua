-- stv2_sweep(session_key; ttl_ms): removes the session, every key of it, if nothing changed in it for `ttl_ms`
-- and none of its tasks is unfinished, in steps (`begin_removal`): the session leaves at the first, and each call
-- deletes a bounded number of its tasks. Returns -1 when removed, -3 while the removal is under way (call again:
-- every call takes it on, from whichever process), -2 when the index listed a session whose hash is gone though
-- nobody removed it (evicted, or lost by Redis) once whatever keys of it were left are removed, otherwise when to
-- look again: the time of its last change, or now for a session kept by an unfinished task (so that it goes to
-- the back of the index instead of coming first in every round).
-- Includes: clock, session, session_state, register.
local function st_sweep(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  if redis.call('EXISTS', session_key) == 0 then
    begin_removal(base, session_key)
    return remove_session_step(base) and -2 or -3
  end
  local state = redis.call('HMGET', session_key, 'touched', 'removing')
  if not state[2] then
    local current = now_ms()
    if redis.call('ZCARD', base .. KEY.live) > 0 then return current end
    local touched = tonumber(state[1] or '0')
    if current - touched < tonumber(args[1]) then return touched end
    begin_removal(base, session_key)
  end
  if not remove_session_step(base) then return -3 end
  redis.call('DEL', session_key)
  return -1
end

register('sweep', session_function(st_sweep))
