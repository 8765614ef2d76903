-- Deletes every key of a session.
local function remove_session(base, session_key)
  for _, walk_id in ipairs(redis.call('SMEMBERS', base .. 'walks')) do
    redis.call('DEL', base .. 'w:' .. walk_id, base .. 'wf:' .. walk_id)
  end
  each_retained(base, function(task_id)
    local key = task_key(base, task_id)
    local run = redis.call('HGET', key, 'run')
    if run then redis.call('DEL', children_key(base, run), key) end
  end)
  redis.call('DEL', session_key, base .. 'live', base .. 'finished', base .. 'linked', base .. 'walks',
    base .. 'events', base .. 'timers', base .. 'early', base .. 'early_order')
end

-- {incarnation, closed ("1" or "0"), unfinished task count, max_finished} of the session under `session_key`, or
-- {} for none.
local function session_state(session_key)
  local state = redis.call('HMGET', session_key, 'inc', 'closed', 'max')
  if not state[1] then return {} end
  local unfinished = redis.call('ZCARD', base_of(session_key) .. 'live')
  return { state[1], state[2] and '1' or '0', tostring(unfinished), state[3] }
end
