-- stv2_sweep(session_key; ttl_ms): removes the session, every key of it, if nothing changed in it for `ttl_ms`
-- and none of its tasks is unfinished. Returns -1 when removed, -2 when the index listed a session whose hash is
-- gone though nobody removed it (evicted, or lost by Redis): whatever keys of it are left are removed, otherwise
-- when to look again: the time of its last change, or now for a session kept by an unfinished task (so that it
-- goes to the back of the index instead of coming first in every round).
local function st_sweep(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  if redis.call('EXISTS', session_key) == 0 then
    remove_session(base, session_key)
    return -2
  end
  local touched = tonumber(redis.call('HGET', session_key, 'touched') or '0')
  local current = now_ms()
  if redis.call('ZCARD', base .. 'live') > 0 then return current end
  if current - touched < tonumber(args[1]) then return touched end
  remove_session(base, session_key)
  return -1
end

register('sweep', session_function(st_sweep))
