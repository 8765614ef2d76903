-- stv2_retime(timers_key, changes_key; session_id, next, changes): records when the session's next timer falls due
-- (-1: none), as `stv2_fire` found it. A timer scheduled since that look (its count of changes moved on) may be
-- missing from `next`: the entry is then left due, and the next look fires and retimes again.
-- Includes: register.
local function st_retime(keys, args)
  local session_id, next_due = args[1], tonumber(args[2])
  if (redis.call('HGET', keys[2], session_id) or '0') ~= args[3] then return 0 end
  if next_due < 0 then
    redis.call('ZREM', keys[1], session_id)
    redis.call('HDEL', keys[2], session_id)
  else
    redis.call('ZADD', keys[1], next_due, session_id)
  end
  return 1
end

register('retime', st_retime)
