-- A task to open, as `stv2_open` and `stv2_open_batch` take it from `a[first]`: "s", its id and the worker process
-- that runs it (a start on the common path: no parent, no option, no timer), or "l" and its twelve values:
-- task_id, parent_id, agent, description, metadata, detached, reserved, process, deadline_ms, claim_timeout_ms,
-- claim_error, structured. The short form spares the server ten arguments a start on the common path leaves empty.
-- Returns the twelve values, then where the next task starts.
local function opening_at(a, first)
  if a[first] == 's' then return a[first + 1], '', '', '', '', '0', '0', a[first + 2], '', '', '', '0', first + 3 end
  return a[first + 1], a[first + 2], a[first + 3], a[first + 4], a[first + 5], a[first + 6], a[first + 7],
    a[first + 8], a[first + 9], a[first + 10], a[first + 11], a[first + 12], first + 13
end

-- Adds a field and its value to a list of them, as HSET takes it.
local function add_field(written, field, value)
  written[#written + 1] = field
  written[#written + 1] = value
end

-- Opens one task of the session: a start or a reservation (`a` holds it from `first`: `opening_at`).
-- Returns {run, status, reason, next timer due or "", origin, cause, handling}, or nil and the refusal's code:
-- DUPLICATE, UNKNOWN_PARENT or PARENT_FINISHED. A task that begins cancelled comes back with its cancel's reason,
-- origin and cause, so that the runner's token fires from this reply alone, and handling "1" when its worker
-- process must report its cancel handlers done (`stv2_handled`).
local function open_task(base, a, first, deadline_reason)
  local task_id, parent_id, agent, description, metadata, detached_flag, reserved_flag, process, deadline,
    claim_timeout_ms, claim_error, structured_flag = opening_at(a, first)
  local detached, reserved = detached_flag == '1', reserved_flag == '1'
  -- "2": a start recorded from another runtime's event, for which any retained run of the id is a repeat.
  local restarts = reserved_flag ~= '2'
  local structured = structured_flag == '1'
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
    forget_replaced_run(base, task_id)
  end
  local at = now()
  local status = reserved and 'queued' or 'running'
  if inherited then status = 'cancelled' end
  -- One HSET with every field the task starts with; only what a task has is written.
  local written = { 'id', task_id, 'run', run, 'status', status, 'started_at', at }
  if process ~= '' then add_field(written, 'worker', process) end
  if agent ~= '' then add_field(written, 'agent', agent) end
  if description ~= '' then add_field(written, 'description', description) end
  if metadata ~= '' then add_field(written, 'metadata', metadata) end
  local attached = parent_run and not detached
  if parent_id ~= '' then add_field(written, 'parent', parent_id) end
  if detached then add_field(written, 'detached', '1') end
  if reserved then add_field(written, 'reserved', '1') end
  if structured then add_field(written, 'structured', '1') end
  if attached then
    add_field(written, 'lp', parent_id)
    add_field(written, 'lr', parent_run)
  end
  if inherited then
    add_field(written, 'cancelled_at', at)
    add_field(written, 'reason', inherited.reason)
    add_field(written, 'origin', inherited.origin)
    add_field(written, 'cause', inherited.cause)
  end
  if deadline ~= '' then
    add_field(written, 'due_ms', deadline)
    add_field(written, 'deadline', string.format('%.3f', tonumber(deadline) / 1000))
  end
  -- What its end must do beyond the common path (`has_timer`, `may_start_group_rule`).
  local timed = deadline ~= '' or (reserved and claim_timeout_ms ~= '')
  local grouped = attached or structured
  if timed or grouped then add_field(written, 'on_end', (timed and 't' or '') .. (grouped and 'g' or '')) end
  redis.call('HSET', key, unpack(written))
  change_live(task_id, run)
  if attached then
    redis.call('SADD', children_key(base, parent_run), task_id)
    redis.call('HSET', task_key(base, parent_id), 'parent_of', '1')
    redis.call('SADD', base .. KEY.linked, task_id, parent_id)
  end
  local reason, origin, cause, handling = '', '', '', ''
  if inherited then
    emit(base, task_id, 'started', 'cancelled', at, 'reason', inherited.reason)
    emit(base, task_id, 'cancelled', 'cancelled', at, 'reason', inherited.reason)
    if reserved then
      finish(base, key, task_id, run, at, 'cancelled', false)
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
      cancel_trees(base, { task_id }, deadline_reason, 'deadline', at)
      status, reason, origin, cause = 'cancelled', deadline_reason, task_id, 'deadline'
      -- `cancel_trees` marks a run that a worker process runs as handling its cancel.
      if process ~= '' and not reserved then handling = '1' end
    else
      redis.call('ZADD', base .. KEY.timers, due, timer('d', task_id, run))
      next_due = deadline
    end
  end
  if reserved and claim_timeout_ms ~= '' and status == 'queued' then
    local due = now_ms() + tonumber(claim_timeout_ms)
    redis.call('HSET', key, 'claim_error', claim_error)
    redis.call('ZADD', base .. KEY.timers, due, timer('c', task_id, run))
    if next_due == '' or due < tonumber(next_due) then next_due = digits(due) end
  end
  return { run, status, reason, next_due, origin, cause, handling }
end
