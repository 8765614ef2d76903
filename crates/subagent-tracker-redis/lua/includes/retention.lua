-- A run that leaves the retained window: its attached children move to its own parent's set (the nearest
-- retained ancestor adopts them), and it leaves its parent's set. `known` holds its fields run, lp, lr and
-- parent_of when the caller has read them.
local function release_run(base, task_id, run, known)
  local key = task_key(base, task_id)
  local link = known or fields(key, 'run', 'lp', 'lr', 'parent_of')
  local parent_id, parent_run = link[2], link[3]
  local parent_alive = false
  if parent_id then
    parent_alive = redis.call('HGET', task_key(base, parent_id), 'run') == parent_run
    redis.call('SREM', children_key(base, parent_run), task_id)
  end
  -- Only a run that ever had attached children has a set (`parent_of`).
  if not link[4] then return end
  local children = redis.call('SMEMBERS', children_key(base, run))
  for _, child in ipairs(children) do
    local child_key = task_key(base, child)
    if parent_alive then
      redis.call('SADD', children_key(base, parent_run), child)
      redis.call('HSET', task_key(base, parent_id), 'parent_of', '1')
      redis.call('HSET', child_key, 'lp', parent_id, 'lr', parent_run)
    else
      redis.call('HDEL', child_key, 'lp', 'lr')
    end
  end
  redis.call('DEL', children_key(base, run))
end

-- Forgets the retained finished runs that ended at or before `cutoff_us`, oldest first, as eviction does; the
-- finished list is in the order runs finished, so the scan stops at the first that ended later. Returns how many.
local function forget_ended_before(base, cutoff_us)
  local forgotten = 0
  while true do
    local entry = redis.call('LINDEX', base .. 'finished', 0)
    if not entry then break end
    local task_id, run = string.match(entry, '^(.*)\t(%d+)$')
    local key = task_key(base, task_id)
    local state = fields(key, 'run', 'lp', 'lr', 'parent_of', 'ended_at')
    if state[1] == run then
      if micros_of(state[5]) > cutoff_us then break end
      release_run(base, task_id, run, state)
      redis.call('DEL', key)
      forgotten = forgotten + 1
    end
    redis.call('LPOP', base .. 'finished')
  end
  if forgotten > 0 then
    stored_retained = stored_retained - forgotten
    record_change('retained', digits(stored_retained))
  end
  return forgotten
end

-- Counts a finished run against the bound and evicts the oldest finished runs beyond it.
local function retain(base, session_key, task_id, run)
  -- Runs past the session's age go before this one joins them: no run is forgotten by its own end, so whoever
  -- waits for it can still read its final fields (queries already leave it out once it is old enough).
  if stored_max_age then forget_ended_before(base, now_us() - stored_max_age) end
  local listed = redis.call('RPUSH', base .. 'finished', task_id .. '\t' .. run)
  local retained = stored_retained + 1
  local max = stored_max or tonumber(redis.call('HGET', session_key, 'max'))
  while retained > max do
    local entry = redis.call('LPOP', base .. 'finished')
    if not entry then break end
    listed = listed - 1
    -- The run is digits, so the last tab separates it, whatever the id holds.
    local old_id, old_run = string.match(entry, '^(.*)\t(%d+)$')
    local old_key = task_key(base, old_id)
    local old = fields(old_key, 'run', 'lp', 'lr', 'parent_of')
    if old[1] == old_run then
      release_run(base, old_id, old_run, old)
      redis.call('DEL', old_key)
      retained = retained - 1
    end
  end
  stored_retained = retained
  record_change('retained', digits(retained))
  -- Runs replaced by a restart of their id leave stale entries; drop them once they outnumber the retained.
  if listed > 2 * retained + 64 then
    local kept = {}
    for _, entry in ipairs(redis.call('LRANGE', base .. 'finished', 0, -1)) do
      local id, entry_run = string.match(entry, '^(.*)\t(%d+)$')
      local state = fields(task_key(base, id), 'run', 'fin')
      if state[1] == entry_run and state[2] == '1' then table.insert(kept, entry) end
    end
    redis.call('DEL', base .. 'finished')
    for first = 1, #kept, 1000 do
      redis.call('RPUSH', base .. 'finished', unpack(kept, first, math.min(first + 999, #kept)))
    end
  end
end

-- Finishes a run: its timers go, it leaves the live index, its `ended` event is emitted, and it counts against the
-- bound. `ending` is what the caller knows: {status = the status it ends with, timed = whether it had a deadline or
-- a claim timeout, written = {field, value, ...} to store with `fin` in the same call}; nil to read the status and
-- the timers here.
local function finish(base, session_key, key, task_id, run, at, ending)
  if not ending then
    local state = fields(key, 'status', 'due_ms', 'claim_error')
    ending = { status = state[1], timed = state[2] or state[3] }
  end
  if ending.timed then
    redis.call('ZREM', base .. 'timers', timer('d', task_id, run), timer('c', task_id, run))
  end
  redis.call('HSET', key, 'fin', '1', 'ended_at', at, unpack(ending.written or {}))
  redis.call('ZREM', base .. 'live', task_id)
  emit(base, task_id, 'ended', ending.status, at, 'run', run)
  retain(base, session_key, task_id, run)
end
