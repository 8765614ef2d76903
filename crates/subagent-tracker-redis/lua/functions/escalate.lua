-- stv2_escalate(session_key; inc, task_id, run): records that the run's runner was stopped by force after its
-- grace (snapshots show it as escalated). Returns 1, or 0 when that run is no longer the task's current one.
-- Includes: session, keys, register.
local function st_escalate(keys, args)
  if not same_incarnation(args[1]) then return 0 end
  local key = task_key(base_of(keys[1]), args[2])
  if redis.call('HGET', key, 'run') ~= args[3] then return 0 end
  redis.call('HSET', key, 'escalated', '1')
  return 1
end

register('escalate', session_function(st_escalate))
