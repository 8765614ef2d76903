-- stv2_get(session_key; inc, task_id, include_aged): the task's fields as a flat list, empty when not retained or,
-- unless include_aged is "1", older than the session's max_age.
-- Includes: session, tasks, register.
local function st_get(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local task = snapshot(base_of(keys[1]), args[2])
  if args[3] ~= '1' and is_aged(task) then return {} end
  return task
end

register('get', session_function(st_get), true)
