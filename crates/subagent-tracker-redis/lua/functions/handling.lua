-- stv2_handling(session_key; inc, task_id, item, ...): one step of a walk through a task and its descendants, for
-- a canceller that waits for them (contract §3, cancel and wait): which of them have cancel handlers their worker
-- is yet to report done. The walk is the caller's: it passes at most HANDLING_STEP items of its frontier, each a
-- task to visit ("t" and its id), a task to check alone ("h" and its id, not its children), or a children set to
-- scan on ("c", the run, a space and the scan's cursor); none, for the first step, which visits the task itself.
-- Returns {finished, count, id, ..., item, ...}: finished "1" once the task's runner has ended, the ids among the
-- items' tasks whose handlers are at work, and the items that follow them (each children set read at most
-- HANDLING_STEP members a step). Empty when the task is not retained. Rust: RedisSession::cancel_work.
-- Includes: session, keys, tasks, register.
local HANDLING_STEP = 32

local function st_handling(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local root = fields(task_key(base, args[2]), 'run', 'fin')
  if not root[1] then return {} end
  local items = { unpack(args, 3, math.min(#args, 2 + HANDLING_STEP)) }
  if #items == 0 then items[1] = 't' .. args[2] end
  local at_work, next_items = {}, {}
  for _, item in ipairs(items) do
    local kind, rest = string.sub(item, 1, 1), string.sub(item, 2)
    if kind == 'c' then
      local run, cursor = string.match(rest, '^(%S+) (%d+)$')
      local scanned = redis.call('SSCAN', children_key(base, run), cursor, 'COUNT', HANDLING_STEP)
      for _, child in ipairs(scanned[2]) do next_items[#next_items + 1] = 't' .. child end
      if scanned[1] ~= '0' then next_items[#next_items + 1] = 'c' .. run .. ' ' .. scanned[1] end
    else
      local state = fields(task_key(base, rest), 'run', 'handling', 'parent_of')
      if state[1] then
        if state[2] == state[1] then at_work[#at_work + 1] = rest end
        if kind == 't' and state[3] then next_items[#next_items + 1] = 'c' .. state[1] .. ' 0' end
      end
    end
  end
  local answer = { root[2] == '1' and '1' or '0', tostring(#at_work) }
  for _, task_id in ipairs(at_work) do answer[#answer + 1] = task_id end
  for _, item in ipairs(next_items) do answer[#answer + 1] = item end
  return answer
end

register('handling', session_function(st_handling), true)
