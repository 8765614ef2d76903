-- stv2_forget_finished(session_key; inc, older_than_us): forgets the finished tasks that ended at least older_than_us
-- microseconds ago, as eviction does (contract §7), at most FORGET_STEP per call. Returns {how many, 1 when more may
-- be left for the next call, else 0}. RedisSession::forget_finished.
-- Includes: clock, session, retention, register.
local FORGET_STEP = 64

local function st_forget_finished(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local forgotten, more = forget_ended_before(base_of(keys[1]), now_us() - tonumber(args[2]), FORGET_STEP)
  return { forgotten, more and 1 or 0 }
end

register('forget_finished', session_function(st_forget_finished))
