-- stv2_drop_lost(session_key; task_id, run, ...): for a session whose hash is gone though nobody removed it
-- (evicted), removes what is left of the runs its worker process held: each run's hash, its children's set and its
-- timers, which nothing indexes any more (the sweep removes what the session's indexes still name). Does nothing
-- for a session whose hash exists. Returns how many runs it removed. Worker::reconcile.
-- Includes: session, keys, register.
local function st_drop_lost(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then return 0 end
  local base = base_of(keys[1])
  local dropped = 0
  for index = 1, #args, 2 do
    local task_id, run = args[index], args[index + 1]
    local key = task_key(base, task_id)
    if redis.call('HGET', key, 'run') == run then
      redis.call('DEL', key, children_key(base, run))
      redis.call('ZREM', base .. KEY.live, task_id)
      redis.call('ZREM', base .. KEY.timers, timer('d', task_id, run), timer('c', task_id, run))
      dropped = dropped + 1
    end
  end
  return dropped
end

register('drop_lost', st_drop_lost)
