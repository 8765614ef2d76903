-- stv2_lease(workers_key; process, lease_ms): renews the worker process's lease to `lease_ms` from the server's
-- clock. Returns {the server's time, 1 if the lease was there (0: it was reaped and forgotten, or is new)}.
local function st_lease(keys, args)
  local current = now_ms()
  local existed = redis.call('ZSCORE', keys[1], args[1]) and 1 or 0
  redis.call('ZADD', keys[1], current + tonumber(args[2]), args[1])
  return { current, existed }
end

register('lease', st_lease)
