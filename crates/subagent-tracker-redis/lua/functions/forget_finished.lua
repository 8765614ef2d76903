-- stv2_forget_finished(session_key; inc, older_than_us): forgets the finished tasks that ended at least older_than_us
-- microseconds ago, as eviction does (contract §7). Returns how many. RedisSession::forget_finished.
local function st_forget_finished(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  return forget_ended_before(base_of(keys[1]), now_us() - tonumber(args[2]))
end

register('forget_finished', session_function(st_forget_finished))
