-- stv2_fire(session_key; deadline_reason): fires the session's due timers, a few per call: a deadline cancels its
-- task's tree (cause deadline), a claim timeout fails a task still queued, and a cascade under way whose caller
-- stopped taking its steps (a walk's timer) takes its next step. A call stops after FIRE_STEP timers, or after a
-- cascade it could not finish in one step, whose timer is then due at once. Returns when the next timer falls due
-- (now, for more to fire), or -1.
-- Includes: clock, session, keys, tasks, retention, cascade, task_groups, register.
local FIRE_STEP = 10

local function st_fire(keys, args)
  local session_key = keys[1]
  if redis.call('EXISTS', session_key) == 0 then return -1 end
  local base = base_of(session_key)
  local at = now()
  local due = {}
  local listed = redis.call('ZRANGEBYSCORE', base .. KEY.timers, '-inf', now_ms(), 'WITHSCORES', 'LIMIT', 0, FIRE_STEP)
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
    if walks_left then break end
    local member, kind, task_id, run = entry.member, entry.kind, entry.task_id, entry.run
    redis.call('ZREM', base .. KEY.timers, member)
    if kind == 'w' then
      local _, done = continue_walk(base, task_id)
      if not done then walks_left = { task_id } end
    end
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
  -- A cascade left under way goes on at once, in the next call.
  if walks_left then
    for _, walk_id in ipairs(walks_left) do
      redis.call('ZADD', base .. KEY.timers, now_ms(), timer('w', walk_id, '0'))
    end
  end
  local next_timer = redis.call('ZRANGE', base .. KEY.timers, 0, 0, 'WITHSCORES')
  if next_timer[2] then return tonumber(next_timer[2]) end
  return -1
end

register('fire', session_function(st_fire))
