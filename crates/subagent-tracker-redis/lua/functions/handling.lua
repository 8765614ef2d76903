-- stv2_handling(session_key; inc, task_id): where a cancel of the task stands for a canceller that waits for it
-- (contract §3, cancel and wait): {finished, id, ...}, with finished "1" once the task's runner has ended, and the
-- ids of the task and its descendants (walked through the children sets, as a cascade walks) whose cancel handlers
-- their worker has yet to report done. Empty when the task is not retained. Rust: RedisSession::cancel_and_wait.
local function st_handling(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local root = fields(task_key(base, args[2]), 'run', 'fin')
  if not root[1] then return {} end
  local answer = { root[2] == '1' and '1' or '0' }
  local stack = { args[2] }
  while #stack > 0 do
    local task_id = table.remove(stack)
    local state = fields(task_key(base, task_id), 'run', 'handling', 'parent_of')
    if state[1] then
      if state[2] == state[1] then answer[#answer + 1] = task_id end
      if state[3] then
        for _, child in ipairs(redis.call('SMEMBERS', children_key(base, state[1]))) do
          stack[#stack + 1] = child
        end
      end
    end
  end
  return answer
end

register('handling', session_function(st_handling), true)
