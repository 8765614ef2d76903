-- stv2_status(session_key; task_id, run, ...): for each run a worker runs, {status, reason, origin, cause,
-- handling, error} (handling "1" while the worker has yet to report the cancel's handlers done; error for a failed
-- run, so that a worker whose run a reaper failed while it was alive fires the run's token; for a running run,
-- {"running", resume_value, pauses, "", ""}: its latest resume, for a worker that missed it), or
-- {"gone"} when that run is no longer the task's current one (run numbers are never reused, whatever happened to
-- the session), or {"lost"} for every run when the session's hash is gone (`EXISTS` leaves its idle time alone,
-- so a worker's reconcile never keeps an evicting server from evicting it).
-- Includes: session, keys, tasks, register.
local function st_status(keys, args)
  local base = base_of(keys[1])
  local statuses = {}
  if redis.call('EXISTS', keys[1]) == 0 then
    for _ = 1, #args, 2 do table.insert(statuses, { 'lost' }) end
    return statuses
  end
  for index = 1, #args, 2 do
    local state = fields(task_key(base, args[index]), 'run', 'status', 'reason', 'origin', 'cause', 'resume_value',
      'pauses', 'handling', 'error')
    if state[1] ~= args[index + 1] then
      table.insert(statuses, { 'gone' })
    elseif state[2] == 'running' then
      table.insert(statuses, { 'running', state[6] or '', state[7] or '0', '', '', '' })
    else
      table.insert(statuses, { state[2], state[3] or '', state[4] or '', state[5] or '', state[8] and '1' or '',
        state[9] or '' })
    end
  end
  return statuses
end

register('status', st_status, true)
