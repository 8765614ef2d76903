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
