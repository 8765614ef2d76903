-- stv2_due(timers_key, changes_key): the sessions with a timer due, by the server's clock, each with its count of
-- changes: {session, changes, session, changes, ...}.
-- Includes: clock, register.
local function st_due(keys)
  local due = redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms())
  local listed = {}
  for _, session_id in ipairs(due) do
    table.insert(listed, session_id)
    table.insert(listed, redis.call('HGET', keys[2], session_id) or '0')
  end
  return listed
end

register('due', st_due, true)
