-- How many tasks one call deletes of a session being removed: a session of any size is removed in calls that
-- each take a bounded time (a task costs a read and a delete).
local REMOVAL_STEP = 64

-- Begins removing a session: it leaves at once, for every process (its incarnation goes from its hash, so every
-- call of its handles is refused as gone and no process finds it), and the keys that are one per session are
-- unlinked (a large one is freed off the server's main thread). Its tasks' keys go in steps
-- (`remove_session_step`); the hash stays, marked, until the last, and says that the removal is under way.
-- Taking it up again where a removal stopped (its caller died) is harmless.
local function begin_removal(base, session_key)
  local unlinked = { base .. KEY.linked, base .. KEY.walks, base .. KEY.events, base .. KEY.timers, base .. KEY.early,
    base .. KEY.early_order }
  for _, walk_id in ipairs(redis.call('SMEMBERS', base .. KEY.walks)) do
    unlinked[#unlinked + 1] = base .. KEY.walk .. walk_id
    unlinked[#unlinked + 1] = base .. KEY.walk_frontier .. walk_id
  end
  redis.call('UNLINK', unpack(unlinked))
  if redis.call('EXISTS', session_key) == 1 then
    redis.call('HDEL', session_key, 'inc')
    redis.call('HSET', session_key, 'removing', '1')
  end
end

-- Deletes at most REMOVAL_STEP tasks of a session being removed (with their children sets), live ones first (a
-- session whose hash was lost may have some); true once none is left, and the session's hash is all that is.
local function remove_session_step(base)
  local task_ids = {}
  local live = redis.call('ZPOPMIN', base .. KEY.live, REMOVAL_STEP)
  for index = 1, #live, 2 do task_ids[#task_ids + 1] = live[index] end
  if #task_ids < REMOVAL_STEP then
    local finished = redis.call('LPOP', base .. KEY.finished, REMOVAL_STEP - #task_ids)
    for _, task_id in ipairs(finished or {}) do task_ids[#task_ids + 1] = task_id end
  end
  for _, task_id in ipairs(task_ids) do
    local key = task_key(base, task_id)
    local run = redis.call('HGET', key, 'run')
    if run then redis.call('UNLINK', children_key(base, run), key) end
  end
  return #task_ids < REMOVAL_STEP and redis.call('EXISTS', base .. KEY.live, base .. KEY.finished) == 0
end

-- {incarnation, closed ("1" or "0"), unfinished task count, max_finished} of the session under `session_key`, or
-- {} for none.
local function session_state(session_key)
  local state = redis.call('HMGET', session_key, 'inc', 'closed', 'max')
  if not state[1] then return {} end
  local unfinished = redis.call('ZCARD', base_of(session_key) .. 'live')
  return { state[1], state[2] and '1' or '0', tostring(unfinished), state[3] }
end
