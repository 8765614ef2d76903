-- stv2_open_batch(session_key; inc, deadline_reason, mode, known, then `known` pairs, then each task as
-- `opening_at` reads it, as stv2_open's): with mode "open", opens every task of the batch, in order, or none; with
-- mode "check", makes the same checks and opens nothing (a batch larger than one call is checked whole, a call per
-- part, before its first part opens: RedisSession::open_batch). A task may name as parent one earlier in the
-- batch; when checking, also one of the `known` tasks, of an earlier part, each an id and what its check said of
-- it. Returns the seven replies of stv2_open per task, one after the other; when checking, what it found of each
-- task as it would open: "<finishes><cancelled>:<due ms or nothing>", each flag "1" or "0". Or an error reply
-- `<CODE> <index>` (the 0-based index of the task refused) with stv2_open's codes, or DUPLICATE_IN_BATCH.
-- Includes: clock, session, keys, tasks, open, register.
local function st_open_batch(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  if stored_closed then return redis.error_reply('CLOSED') end
  local base = base_of(session_key)
  local current_ms = now_ms()
  local checking = args[3] == 'check'
  local known = tonumber(args[4])
  -- Every refusal is found before the first task opens (the function runs alone, so nothing changes between),
  -- including a parent earlier in the batch that will have finished by the time its child opens: a reservation
  -- that begins cancelled (under a cancelled parent, or past its deadline) finishes as it opens.
  local opened_here = {}
  for index = 5, 3 + 2 * known, 2 do
    local state = args[index + 1]
    opened_here[args[index]] = { finishes = string.sub(state, 1, 1) == '1',
      cancelled = string.sub(state, 2, 2) == '1', due = tonumber(string.sub(state, 4)) }
  end
  local starts = {}
  local found = {}
  local first = 5 + 2 * known
  while first <= #args do
    local index = #starts
    starts[index + 1] = first
    local task_id, parent_id, _, _, _, detached_flag, reserved_flag, _, deadline, _, _, _, next_first =
      opening_at(args, first)
    first = next_first
    local detached, reserved = detached_flag == '1', reserved_flag == '1'
    local refusal = nil
    local inherits_cancel, inherited_due = false, nil
    if opened_here[task_id] then
      refusal = 'DUPLICATE_IN_BATCH'
    else
      local old = fields(task_key(base, task_id), 'run', 'fin')
      if old[1] and old[2] ~= '1' then refusal = 'DUPLICATE' end
    end
    if not refusal and parent_id ~= '' then
      local here = opened_here[parent_id]
      if here then
        if here.finishes then refusal = 'PARENT_FINISHED' end
        inherits_cancel, inherited_due = here.cancelled, here.due
      else
        local parent = fields(task_key(base, parent_id), 'run', 'fin', 'status', 'due_ms')
        if not parent[1] then
          refusal = 'UNKNOWN_PARENT'
        elseif parent[2] == '1' then
          refusal = 'PARENT_FINISHED'
        end
        inherits_cancel, inherited_due = parent[3] == 'cancelled', tonumber(parent[4])
      end
    end
    if refusal then return redis.error_reply(refusal .. ' ' .. index) end
    if detached then inherits_cancel, inherited_due = false, nil end
    local due = deadline ~= '' and tonumber(deadline) or nil
    if inherited_due and (not due or inherited_due < due) then due = inherited_due end
    local early = redis.call('HGET', base .. KEY.early, task_id)
    local early_live = early ~= false and tonumber(string.match(early, '^(%d+)')) > now_us()
    local cancelled = inherits_cancel or early_live or (due ~= nil and due <= current_ms)
    opened_here[task_id] = { cancelled = cancelled, finishes = cancelled and reserved, due = due }
    if checking then
      found[#found + 1] = ((cancelled and reserved) and '1' or '0') .. (cancelled and '1' or '0') .. ':' ..
        (due and tostring(due) or '')
    end
  end
  if checking then return found end
  local replies = {}
  for index, start in ipairs(starts) do
    local opened, refusal = open_task(base, args, start, args[2])
    -- Unreachable after the checks above; were it reached, the tasks before it would stay open.
    if not opened then return redis.error_reply('PROTOCOL ' .. refusal .. ' ' .. (index - 1)) end
    for _, reply in ipairs(opened) do replies[#replies + 1] = reply end
  end
  return replies
end

register('open_batch', session_function(st_open_batch))
