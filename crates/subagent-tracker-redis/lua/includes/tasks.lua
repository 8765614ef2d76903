local function fields(key, ...)
  return redis.call('HMGET', key, ...)
end

local function snapshot(base, task_id)
  return redis.call('HGETALL', task_key(base, task_id))
end

-- The value of `name` in a flat field list (an HGETALL reply).
local function field_of(flat, name)
  for index = 1, #flat, 2 do
    if flat[index] == name then return flat[index + 1] end
  end
  return nil
end

-- True for a finished task (a flat field list) that ended at least the session's `max_age` ago: the next end in the
-- session, or a `forget_finished`, forgets it, and queries treat it as forgotten already (contract §7).
local function is_aged(flat)
  if not stored_max_age or field_of(flat, 'fin') ~= '1' then return false end
  local ended_at = field_of(flat, 'ended_at')
  return ended_at ~= nil and micros_of(ended_at) <= now_us() - stored_max_age
end

-- Calls `visit(task_id, run)` for every retained run: the unfinished ones of the live index, then the finished
-- ones of the finished list (whose entries of replaced runs are stale: the task's hash holds another run).
local function each_retained(base, visit)
  local live = redis.call('ZRANGE', base .. 'live', 0, -1, 'WITHSCORES')
  -- A score comes back as the server formats a double; the run as the task's hash holds it is its digits.
  for index = 1, #live, 2 do visit(live[index], digits(tonumber(live[index + 1]))) end
  for _, entry in ipairs(redis.call('LRANGE', base .. 'finished', 0, -1)) do
    local task_id, run = string.match(entry, '^(.*)\t(%d+)$')
    visit(task_id, run)
  end
end
