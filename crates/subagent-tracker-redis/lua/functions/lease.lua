-- stv2_lease(workers_key; process, lease_ms): renews the worker process's lease to `lease_ms` from the server's
-- clock. Returns {the server's time, 1 if the lease was there (0: it was reaped and forgotten, or is new), the
-- expiry it had (-1 for none), the expiry it has now}: an expiry other than the one the process last wrote tells
-- it that Redis lost its writes (a restart from older state, a failover to a lagging replica).
-- Includes: clock, register.
local function st_lease(keys, args)
  local current = now_ms()
  local previous = redis.call('ZSCORE', keys[1], args[1])
  local expiry = current + tonumber(args[2])
  redis.call('ZADD', keys[1], expiry, args[1])
  return { current, previous and 1 or 0, previous and tonumber(previous) or -1, expiry }
end

register('lease', st_lease)
