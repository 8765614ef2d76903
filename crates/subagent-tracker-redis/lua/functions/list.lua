-- stv2_list(session_key; inc, which): the fields of every pending ("pending") or retained ("all") task, in start
-- order.
local function st_list(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local found = {}
  if args[2] == 'pending' then
    for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
      local task = snapshot(base, task_id)
      if PENDING[field_of(task, 'status')] then table.insert(found, task) end
    end
    return found
  end
  each_retained(base, function(task_id)
    local task = snapshot(base, task_id)
    if #task > 0 and not is_aged(task) then
      table.insert(found, { run = tonumber(field_of(task, 'run')), task = task })
    end
  end)
  table.sort(found, function(left, right) return left.run < right.run end)
  local listed = {}
  for index, item in ipairs(found) do listed[index] = item.task end
  return listed
end

register('list', session_function(st_list), true)
