-- stv2_cancel_all(session_key; inc, reason, close, caller): cancels every pending task, going through the live
-- index in start order, in steps; with close = "1", first records the session as closed (keeping the first
-- reason). A task started after the call began is not among them (after a close none can start). Returns {how
-- many this step moved, the walk left under way or "", its timer, what it told `caller`} (as stv2_cancel's).
-- Includes: clock, session, cascade, register.
local function st_cancel_all(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch()
  local reason = args[2]
  if args[3] == '1' then
    redis.call('HSETNX', session_key, 'closed', reason)
    reason = redis.call('HGET', session_key, 'closed')
  end
  tell_caller(args[4])
  local walk = start_walk(base_of(session_key), new_walk({ kind = 'session', reason = reason, cause = 'session',
    at = now(), cursor = '0', upto = stored_seq_digits }))
  return { walk.moved, walk.left or '', walk.due or '', told_caller() }
end

register('cancel_all', session_function(st_cancel_all))
