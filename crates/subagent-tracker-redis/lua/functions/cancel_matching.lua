-- stv2_cancel_matching(session_key; inc, reason, agent, status, metadata): cancels the pending tasks that match
-- every filter given, each as stv2_cancel would (cause "requested"), in one cascade (contract §3, cancel by
-- filter). A filter not given is ""; agent and status are given as "=<value>", metadata as a JSON object whose
-- every key a task's metadata must hold with an equal JSON value. The rule is the core's `TaskFilter`. Returns the
-- ids of the matching tasks it moved, in start order (one reached by an earlier match's cascade included).

-- Equal JSON values, as cjson decodes them: numbers by value (1 is 1.0), objects and arrays member by member.
-- Metadata nests at most 64 deep (checked before it is stored), which bounds the recursion.
local function json_equal(left, right)
  if type(left) ~= 'table' or type(right) ~= 'table' then return left == right end
  for key, value in pairs(left) do
    if not json_equal(value, right[key]) then return false end
  end
  for key in pairs(right) do
    if left[key] == nil then return false end
  end
  return true
end

local function metadata_holds(stored, wanted)
  local metadata = stored and cjson.decode(stored) or {}
  if type(metadata) ~= 'table' then return false end
  for key, value in pairs(wanted) do
    if metadata[key] == nil or not json_equal(metadata[key], value) then return false end
  end
  return true
end

local function st_cancel_matching(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch()
  local base = base_of(session_key)
  local reason, agent, status = args[2], args[3], args[4]
  local wanted = args[5] ~= '' and cjson.decode(args[5]) or nil
  local matched = {}
  for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
    local task = fields(task_key(base, task_id), 'status', 'agent', 'metadata')
    if task[1] and PENDING[task[1]]
      and (status == '' or status == '=' .. task[1])
      and (agent == '' or (task[2] and agent == '=' .. task[2]))
      and (not wanted or metadata_holds(task[3], wanted)) then
      matched[#matched + 1] = task_id
    end
  end
  local moved_ids = {}
  if #matched > 0 then cancel_trees(base, matched, reason, 'requested', now(), moved_ids) end
  local moved = {}
  for _, task_id in ipairs(matched) do
    if moved_ids[task_id] then moved[#moved + 1] = task_id end
  end
  return moved
end

register('cancel_matching', session_function(st_cancel_matching))
