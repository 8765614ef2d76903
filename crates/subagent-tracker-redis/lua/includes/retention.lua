-- A run that leaves the retained window: its attached children move to its own parent's set (the nearest
-- retained ancestor adopts them), it leaves its parent's set, and its own set goes. Only a run in the `linked` set
-- has a parent's set or a set of its own; the caller removes the task's hash.
local function release_run(base, task_id)
  redis.call('SREM', base .. KEY.linked, task_id)
  local key = task_key(base, task_id)
  local link = fields(key, 'run', 'lp', 'lr', 'parent_of')
  local run, parent_id, parent_run = link[1], link[2], link[3]
  local parent_alive = false
  if parent_id then
    parent_alive = redis.call('HGET', task_key(base, parent_id), 'run') == parent_run
    redis.call('SREM', children_key(base, parent_run), task_id)
  end
  if not link[4] then return end
  local children = redis.call('SMEMBERS', children_key(base, run))
  for _, child in ipairs(children) do
    local child_key = task_key(base, child)
    if parent_alive then
      redis.call('SADD', children_key(base, parent_run), child)
      redis.call('HSET', task_key(base, parent_id), 'parent_of', '1')
      redis.call('SADD', base .. KEY.linked, parent_id)
      redis.call('HSET', child_key, 'lp', parent_id, 'lr', parent_run)
    else
      redis.call('HDEL', child_key, 'lp', 'lr')
    end
  end
  redis.call('DEL', children_key(base, run))
end

-- Forgets retained finished runs that have left the finished list (at most a few thousand: `unpack`'s bound):
-- each is released if linked, and its hash goes.
local function forget_runs(base, task_ids)
  if #task_ids == 0 then return end
  local linked = redis.call('SMISMEMBER', base .. KEY.linked, unpack(task_ids))
  local doomed = {}
  for index, task_id in ipairs(task_ids) do
    if linked[index] == 1 then release_run(base, task_id) end
    doomed[index] = task_key(base, task_id)
  end
  redis.call('DEL', unpack(doomed))
end

-- Forgets the finished run of `task_id`, whose id a new run takes: it leaves the finished list (searched from its
-- newest end, where a run restarted soon after its end is) and is released.
local function forget_replaced_run(base, task_id)
  local position = finished_at and finished_at[task_id]
  if position then
    -- It finished in this call: it never reaches the list.
    finished_now[position], finished_at[task_id] = false, nil
  else
    redis.call('LREM', base .. KEY.finished, -1, task_id)
  end
  forget_runs(base, { task_id })
end

-- Evicts the oldest finished runs beyond the session's bound, as a call ends: a call that finishes many runs
-- evicts once, and, since a call runs alone, no observer ever sees more retained than the bound.
local function evict_beyond_bound(base, finished_length)
  -- A cascade under way may have to pass through them (`WALK_STEP`): its last step's call evicts.
  if redis.call('EXISTS', base .. KEY.walks) == 1 then return end
  finished_length = finished_length or redis.call('LLEN', base .. KEY.finished)
  local excess = stored_max and finished_length - stored_max or 0
  while excess > 0 do
    local popped = redis.call('LPOP', base .. KEY.finished, math.min(excess, 1000))
    if not popped then break end
    forget_runs(base, popped)
    excess = excess - #popped
  end
end

-- Forgets the retained finished runs that ended at or before `cutoff_us`, oldest first, at most `limit` of them,
-- as eviction does; the finished list is in the order runs finished, so the scan stops at the first that ended
-- later. Returns how many, and whether more may be left (the limit was reached).
local function forget_ended_before(base, cutoff_us, limit)
  local forgotten = 0
  while forgotten < limit do
    local oldest = redis.call('LINDEX', base .. KEY.finished, 0)
    if not oldest then break end
    local ended_at = redis.call('HGET', task_key(base, oldest), 'ended_at')
    if ended_at and micros_of(ended_at) > cutoff_us then break end
    redis.call('LPOP', base .. KEY.finished)
    forget_runs(base, { oldest })
    forgotten = forgotten + 1
  end
  if forgotten > 0 then touch() end
  return forgotten, forgotten == limit
end

-- At most this many runs past the session's age are forgotten by a call that finishes a run.
local AGED_PER_CALL = 32

-- Counts a finished run against the bound, last in the finished list (written as the call ends:
-- `write_gathered`); the call evicts beyond the bound as it ends (`evict_beyond_bound`).
local function retain(base, task_id)
  -- Runs past the session's age go before this one joins them: no run is forgotten by its own end, so whoever
  -- waits for it can still read its final fields (queries already leave it out once it is old enough).
  if stored_max_age and not aged_forgotten then
    aged_forgotten = true
    -- A few per call: queries leave out what is older already, and the next calls forget the rest.
    forget_ended_before(base, now_us() - stored_max_age, AGED_PER_CALL)
  end
  finished_now, finished_at = finished_now or {}, finished_at or {}
  finished_now[#finished_now + 1] = task_id
  finished_at[task_id] = #finished_now
  eviction_due = evict_beyond_bound
end

-- Finishes a run: its timers go, it leaves the live index, its `ended` event is emitted, and it counts against the
-- bound. The caller gives what it knows: the status it ends with, whether it had a deadline or a claim timeout,
-- and the fields to store with `fin` in the same HSET ({field, value, ...}, or nil); a nil status reads the
-- status and the timers here.
local function finish(base, key, task_id, run, at, status, timed, written)
  if not status then
    local state = fields(key, 'status', 'on_end')
    status, timed = state[1], has_timer(state[2])
  end
  if timed then
    redis.call('ZREM', base .. KEY.timers, timer('d', task_id, run), timer('c', task_id, run))
  end
  if written then
    redis.call('HSET', key, 'fin', '1', 'ended_at', at, unpack(written))
  else
    redis.call('HSET', key, 'fin', '1', 'ended_at', at)
  end
  change_live(task_id, false)
  emit(base, task_id, 'ended', status, at, 'run', run)
  retain(base, task_id)
end
