-- stv2_handled(session_key; task_id, run, ...): the worker process that runs these runs has applied their cancels
-- and their cancel handlers have finished: each run's `handling` mark goes (contract §3, cancel and wait). A run
-- that is no longer the task's current one is passed over. Returns how many marks went. Rust: the worker's
-- report after it applied cancels (Worker::report_handled).
-- Includes: session, keys, register.
local function st_handled(keys, args)
  local base = base_of(keys[1])
  local cleared = 0
  for index = 1, #args, 2 do
    local key = task_key(base, args[index])
    if redis.call('HGET', key, 'handling') == args[index + 1] then
      redis.call('HDEL', key, 'handling')
      cleared = cleared + 1
    end
  end
  return cleared
end

register('handled', st_handled)
