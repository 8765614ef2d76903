-- stv2_claim(session_key; inc, task_id, process): a runner takes a reserved task. Returns {run, status, reason,
-- origin, cause, handling} (a cancelled task's cancel, so that the runner's token fires from this reply alone);
-- errors GONE, NOT_RESERVED, CLAIMED or ENDED <status>.
-- Includes: clock, session, keys, tasks, events, register.
local function st_claim(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  local task_id, process = args[2], args[3]
  local base = base_of(session_key)
  local key = task_key(base, task_id)
  local state = fields(key, 'run', 'status', 'reserved', 'claimed_at', 'reason', 'origin', 'cause', 'handling')
  if not state[1] then return redis.error_reply('NOT_RESERVED') end
  if state[3] ~= '1' or state[4] then return redis.error_reply('CLAIMED') end
  local status = state[2]
  if status ~= 'queued' and status ~= 'cancelled' then return redis.error_reply('ENDED ' .. status) end
  if status == 'queued' then status = 'running' end
  touch()
  local at = now()
  redis.call('ZREM', base .. KEY.timers, timer('c', task_id, state[1]))
  redis.call('HSET', key, 'status', status, 'claimed_at', at, 'worker', process)
  emit(base, task_id, 'claimed', status, at)
  return { state[1], status, state[5] or '', state[6] or '', state[7] or '', state[8] and '1' or '' }
end

register('claim', session_function(st_claim))
