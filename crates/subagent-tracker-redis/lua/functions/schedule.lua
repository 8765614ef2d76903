-- stv2_schedule(timers_key, changes_key; session_id, due_ms): records that the session has a timer due at
-- `due_ms`, unless one is due earlier, and counts the change (so a retime that read the session before it leaves
-- the entry alone).
-- Includes: register.
local function st_schedule(keys, args)
  redis.call('ZADD', keys[1], 'LT', args[2], args[1])
  return redis.call('HINCRBY', keys[2], args[1], 1)
end

register('schedule', st_schedule)
