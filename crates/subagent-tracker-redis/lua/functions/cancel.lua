-- stv2_cancel(session_key; inc, task_id, reason, cause): a cancel of one task and its pending descendants.
-- Returns 1 when the task itself moved, 0 otherwise.
local function st_cancel(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch(session_key)
  local base = base_of(session_key)
  local key = task_key(base, args[2])
  local status = redis.call('HGET', key, 'status')
  if not status or not PENDING[status] then return 0 end
  cancel_trees(base, session_key, { args[2] }, args[3], args[4], now())
  return 1
end

register('cancel', session_function(st_cancel))
