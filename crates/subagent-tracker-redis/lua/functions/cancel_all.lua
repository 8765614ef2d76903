-- stv2_cancel_all(session_key; inc, reason, close): cancels every pending task; with close = "1", first records
-- the session as closed (keeping the first reason). Returns how many moved.
local function st_cancel_all(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch()
  local base = base_of(session_key)
  local reason = args[2]
  if args[3] == '1' then
    redis.call('HSETNX', session_key, 'closed', reason)
    reason = redis.call('HGET', session_key, 'closed')
  end
  -- Every unfinished task; the cancelled among them are passed over.
  local roots = redis.call('ZRANGE', base .. 'live', 0, -1)
  return cancel_trees(base, roots, reason, 'session', now())
end

register('cancel_all', session_function(st_cancel_all))
