-- stv2_expired(workers_key): the worker processes whose lease has passed, by the server's clock, each with its
-- expiry.
-- Includes: clock, register.
local function st_expired(keys)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms(), 'WITHSCORES')
end

register('expired', st_expired, true)
