-- stv2_index(sessions_key; session_id): lists the session in the index, as changed now by the server's clock (an
-- entry only ever moves later: the index is a hint of when to look, and each session's hash has the truth).
-- Includes: clock, register.
local function st_index(keys, args)
  return redis.call('ZADD', keys[1], 'GT', now_ms(), args[1])
end

register('index', st_index)
