-- stv2_drop_stale(sorted_set_key; age_ms, member...): removes the members whose score (a time, in milliseconds) is
-- at least `age_ms` old by the server's clock; one stamped again since the caller's look stays. It withdraws a
-- worker process's announcements (one announced again meanwhile stays) and takes swept sessions out of the index
-- (one listed again since the sweep's look, its id naming a new session, stays).
-- Includes: clock, register.
local function st_drop_stale(keys, args)
  local before = now_ms() - tonumber(args[1])
  local dropped = 0
  for index = 2, #args do
    local stamp = tonumber(redis.call('ZSCORE', keys[1], args[index]))
    if stamp and stamp <= before then dropped = dropped + redis.call('ZREM', keys[1], args[index]) end
  end
  return dropped
end

register('drop_stale', st_drop_stale)
