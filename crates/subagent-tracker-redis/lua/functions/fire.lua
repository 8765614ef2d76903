-- stv2_fire(session_key; deadline_reason): fires the session's due timers: a deadline cancels its task's tree
-- (cause deadline), a claim timeout fails a task still queued. Returns when the next timer falls due, or -1.
local function st_fire(keys, args)
  local session_key = keys[1]
  if redis.call('EXISTS', session_key) == 0 then return -1 end
  local base = base_of(session_key)
  local at = now()
  local due = {}
  local listed = redis.call('ZRANGEBYSCORE', base .. 'timers', '-inf', now_ms(), 'WITHSCORES')
  if #listed > 0 then touch() end
  for index = 1, #listed, 2 do
    local kind, task_id, run = string.match(listed[index], '^(%a)\t(.*)\t(%d+)$')
    table.insert(due, { member = listed[index], at = tonumber(listed[index + 1]), kind = kind, task_id = task_id,
      run = run })
  end
  -- Timers due at one instant fire in start order, so a parent's deadline reaches its children (which share
  -- it) as a cascade, as in memory.
  table.sort(due, function(left, right)
    if left.at ~= right.at then return left.at < right.at end
    return tonumber(left.run) < tonumber(right.run)
  end)
  for _, entry in ipairs(due) do
    local member, kind, task_id, run = entry.member, entry.kind, entry.task_id, entry.run
    redis.call('ZREM', base .. 'timers', member)
    local key = task_key(base, task_id)
    local state = fields(key, 'run', 'status', 'claim_error')
    if state[1] == run then
      if kind == 'd' and PENDING[state[2]] then
        cancel_trees(base, { task_id }, args[1], 'deadline', at)
      elseif kind == 'c' and state[2] == 'queued' then
        redis.call('HSET', key, 'status', 'failed')
        settle_group(base, key, task_id, run, 'failed', at)
        local written = { 'status', 'failed', 'error', state[3] or 'claim timeout' }
        finish(base, key, task_id, run, at, 'failed', true, written)
      end
    end
  end
  local next_timer = redis.call('ZRANGE', base .. 'timers', 0, 0, 'WITHSCORES')
  if next_timer[2] then return tonumber(next_timer[2]) end
  return -1
end

register('fire', session_function(st_fire))
