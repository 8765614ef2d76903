-- stv2_unlock(lock_key; holder): releases a lock only if `holder` still holds it.
-- Includes: register.
local function st_unlock(keys, args)
  if redis.call('GET', keys[1]) == args[1] then return redis.call('DEL', keys[1]) end
  return 0
end

register('unlock', st_unlock)
