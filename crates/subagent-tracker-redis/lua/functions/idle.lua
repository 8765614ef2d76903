-- stv2_idle(sessions_key; ttl_ms, count): up to `count` sessions of the index whose recorded last change is older
-- than `ttl_ms`, by the server's clock: the candidates for `stv2_sweep`.
-- Includes: clock, register.
local function st_idle(keys, args)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms() - tonumber(args[1]), 'LIMIT', 0, tonumber(args[2]))
end

register('idle', st_idle, true)
