-- stv2_cancel(session_key; inc, task_id, reason, cause, before_start, run, caller): a cancel of one task and its
-- pending descendants. With before_start "1", a task that is not pending has the cancel recorded for its next start
-- instead, kept for the session's `early_ttl` (contract §3, cancel before start). A run other than "" aims at
-- that run only: a linked token reaches the run it was linked to, never a later run of the same id. Returns {1
-- when the task itself moved, else 0; the walk its cascade left under way, or "", and that walk's timer; what it
-- told the caller's worker process `caller`} (`stv2_walk` takes its steps; the timer, in milliseconds since the
-- epoch, is for the registry's index; the caller applies what it was told: `tell_caller`).
-- Includes: clock, session, keys, tasks, cascade, register.
local function st_cancel(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch()
  local base = base_of(session_key)
  local key = task_key(base, args[2])
  local task = fields(key, 'status', 'run')
  local status = task[1]
  local run = args[6] or ''
  if run ~= '' and task[2] ~= run then return { 0, '', '', '' } end
  if not status or not PENDING[status] then
    if args[5] == '1' then
      local ttl_us = tonumber(redis.call('HGET', session_key, 'early_ttl')) or DEFAULT_EARLY_CANCEL_TTL_US
      record_early_cancel(base, args[2], args[3], ttl_us)
    end
    return { 0, '', '', '' }
  end
  tell_caller(args[7])
  local walk = new_walk({ kind = 'tree', reason = args[3], cause = args[4], at = now() })
  push_visit(walk, args[2], args[2], '1')
  start_walk(base, walk)
  return { 1, walk.left or '', walk.due or '', told_caller() }
end

register('cancel', session_function(st_cancel))
