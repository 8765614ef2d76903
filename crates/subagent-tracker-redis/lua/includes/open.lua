-- The fields of one task to open, in the order `stv2_open` and `stv2_open_batch` take them.
local OPEN_FIELDS = 12

-- Opens one task of the session: a start or a reservation (`a` holds its OPEN_FIELDS arguments from `first`).
-- Returns {run, status, reason, next timer due or "", origin, cause, handling}, or nil and the refusal's code:
-- DUPLICATE, UNKNOWN_PARENT or PARENT_FINISHED. A task that begins cancelled comes back with its cancel's reason,
-- origin and cause, so that the runner's token fires from this reply alone, and handling "1" when its worker
-- process must report its cancel handlers done (`stv2_handled`).
local function open_task(session_key, base, a, first, deadline_reason)
  local task_id, parent_id, agent, description, metadata = a[first], a[first + 1], a[first + 2], a[first + 3],
    a[first + 4]
  local detached, reserved = a[first + 5] == '1', a[first + 6] == '1'
  -- "2": a start recorded from another runtime's event, for which any retained run of the id is a repeat.
  local restarts = a[first + 6] ~= '2'
  local process, deadline = a[first + 7], a[first + 8]
  local claim_timeout_ms, claim_error = a[first + 9], a[first + 10]
  local structured = a[first + 11] == '1'
  local key = task_key(base, task_id)
  local old = fields(key, 'run', 'fin')
  if old[1] and (old[2] ~= '1' or not restarts) then return nil, 'DUPLICATE' end
  local inherited = nil
  local parent_run = nil
  if parent_id ~= '' then
    local parent = fields(task_key(base, parent_id), 'run', 'fin', 'status', 'reason', 'origin', 'due_ms',
      'metadata')
    if not parent[1] then return nil, 'UNKNOWN_PARENT' end
    if parent[2] == '1' then return nil, 'PARENT_FINISHED' end
    parent_run = parent[1]
    if parent[3] == 'cancelled' and not detached then
      inherited = { reason = parent[4], origin = parent[5], cause = 'parent' }
    end
    if parent[6] and not detached then
      local bound = tonumber(parent[6])
      if deadline == '' or bound < tonumber(deadline) then deadline = parent[6] end
    end
    if parent[7] and not detached then metadata = inherit_metadata(parent[7], metadata) end
  end
  -- A cancel recorded for this id before it started: used up by this start, which it cancels unless the parent's
  -- cancel came first.
  local early_reason = take_early_cancel(base, task_id)
  if early_reason and not inherited then
    inherited = { reason = early_reason, origin = task_id, cause = 'requested' }
  end
  local run = next_run()
  -- A refused start changes nothing, its time of last change included.
  if old[1] then
    -- A finished run of this id is replaced: it stops counting against the bound now.
    release_run(base, task_id, old[1])
    redis.call('DEL', key)
    stored_retained = stored_retained - 1
    record_change('seq', run, 'retained', digits(stored_retained))
  else
    record_change('seq', run)
  end
  local at = now()
  local status = reserved and 'queued' or 'running'
  if inherited then status = 'cancelled' end
  -- One HSET with every field the task starts with.
  local written = { 'id', task_id, 'run', run, 'status', status, 'started_at', at }
  local optional = { 'parent', parent_id, 'agent', agent, 'description', description, 'metadata', metadata,
    'worker', process }
  for index = 1, #optional, 2 do
    if optional[index + 1] ~= '' then
      written[#written + 1] = optional[index]
      written[#written + 1] = optional[index + 1]
    end
  end
  local flags = { 'detached', detached, 'reserved', reserved, 'structured', structured }
  for index = 1, #flags, 2 do
    if flags[index + 1] then
      written[#written + 1] = flags[index]
      written[#written + 1] = '1'
    end
  end
  local attached = parent_run and not detached
  if attached then
    for _, value in ipairs({ 'lp', parent_id, 'lr', parent_run }) do written[#written + 1] = value end
  end
  if inherited then
    for _, value in ipairs({ 'cancelled_at', at, 'reason', inherited.reason, 'origin', inherited.origin,
      'cause', inherited.cause }) do
      written[#written + 1] = value
    end
  end
  if deadline ~= '' then
    for _, value in ipairs({ 'due_ms', deadline, 'deadline', string.format('%.3f', tonumber(deadline) / 1000) }) do
      written[#written + 1] = value
    end
  end
  redis.call('HSET', key, unpack(written))
  redis.call('ZADD', base .. 'live', run, task_id)
  if attached then
    redis.call('SADD', children_key(base, parent_run), task_id)
    redis.call('HSET', task_key(base, parent_id), 'parent_of', '1')
  end
  local reason, origin, cause, handling = '', '', '', ''
  if inherited then
    emit(base, task_id, 'started', 'cancelled', at, 'reason', inherited.reason)
    emit(base, task_id, 'cancelled', 'cancelled', at, 'reason', inherited.reason)
    if reserved then
      finish(base, session_key, key, task_id, run, at, { status = 'cancelled', timed = false })
    end
    reason, origin, cause = inherited.reason, inherited.origin, inherited.cause
  else
    emit(base, task_id, 'started', status, at)
  end
  local next_due = ''
  -- A task that begins cancelled has no use for a deadline's timer: nothing can cancel it again.
  if deadline ~= '' and PENDING[status] then
    local due = tonumber(deadline)
    if due <= now_ms() then
      cancel_trees(base, session_key, { task_id }, deadline_reason, 'deadline', at)
      status, reason, origin, cause = 'cancelled', deadline_reason, task_id, 'deadline'
      -- `cancel_trees` marks a run that a worker process runs as handling its cancel.
      if process ~= '' and not reserved then handling = '1' end
    else
      redis.call('ZADD', base .. 'timers', due, timer('d', task_id, run))
      next_due = deadline
    end
  end
  if reserved and claim_timeout_ms ~= '' and status == 'queued' then
    local due = now_ms() + tonumber(claim_timeout_ms)
    redis.call('HSET', key, 'claim_error', claim_error)
    redis.call('ZADD', base .. 'timers', due, timer('c', task_id, run))
    if next_due == '' or due < tonumber(next_due) then next_due = digits(due) end
  end
  return { run, status, reason, next_due, origin, cause, handling }
end
