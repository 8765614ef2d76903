-- stv2_announce(workers_key, announced_key; process, lease_ms, session...): records that the worker process runs
-- tasks in the sessions, stamped with the server's time (so `stv2_drop_stale` never drops an announcement newer
-- than what it was asked about). An announcement never outlives its lease: a process whose lease a reaper forgot
-- gets one again, so that the reaper finds what it announces should it die. Returns 1 if the lease was there.
-- Includes: clock, register.
local function st_announce(keys, args)
  local current = now_ms()
  local lease_held = redis.call('ZSCORE', keys[1], args[1]) and 1 or 0
  if lease_held == 0 then redis.call('ZADD', keys[1], current + tonumber(args[2]), args[1]) end
  for index = 3, #args do redis.call('ZADD', keys[2], current, args[index]) end
  return lease_held
end

register('announce', st_announce)
