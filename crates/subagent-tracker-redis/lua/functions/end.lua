-- stv2_end(session_key; inc, task_id, run, outcome, value, error_type, error_code): the runner's end (outcome
-- completed, failed with the message as value and the failure's type and code, or stopped with the reason as
-- value), a dropped handle (dropped), an end recorded by id (run ""), or an expired claim (claim_expired: fails
-- only a queued task).
-- Returns {transitioned, finished_now}: {0, 0} when the run had already finished or is not the current one. An end
-- by id through an object of an ended incarnation is refused with GONE; a runner's end of such a run is {0, 0}.
-- An end by id of a paused run tells its worker process ("ended" as a notification's cause), whose runner waits
-- for a resume that will not come.
local function st_end(keys, args)
  local session_key = keys[1]
  local task_id, run, outcome, value = args[2], args[3], args[4], args[5]
  if not same_incarnation(args[1]) then
    if run == '' then return gone() end
    return { 0, 0 }
  end
  local base = base_of(session_key)
  local key = task_key(base, task_id)
  local state = fields(key, 'run', 'status', 'fin', 'due_ms', 'claim_error', unpack(GROUP_FIELDS))
  local paused_runner = run == '' and state[2] == 'paused' and redis.call('HGET', key, 'worker')
  if not state[1] or state[3] == '1' or (run ~= '' and state[1] ~= run) then
    touch()
    return { 0, 0 }
  end
  local status = state[2]
  if outcome == 'claim_expired' then
    if status ~= 'queued' then
      touch()
      return { 0, 0 }
    end
    outcome = 'failed'
  elseif outcome == 'dropped' then
    -- A handle dropped without an end: a running task fails, a cancelled one just finishes.
    if PENDING[status] then outcome = 'failed' else outcome = 'stopped' end
  elseif outcome == 'stopped' and PENDING[status] then
    -- The runner stopped on a cancel this store has not seen (its own): the stop is a cancel, then the end.
    cancel_trees(base, session_key, { task_id }, value ~= '' and value or 'cancelled', 'requested', now())
    status = 'cancelled'
  end
  local transitioned = 0
  -- The end's fields go with `fin` in one HSET, and the session's with its count of retained runs: an end that
  -- finishes a run records the change through `retain`.
  local written = {}
  if PENDING[status] and outcome ~= 'stopped' then
    written = { 'status', outcome }
    status = outcome
    transitioned = 1
  end
  if outcome == 'completed' and value ~= '' then
    written[#written + 1] = 'result'
    written[#written + 1] = value
  elseif outcome == 'failed' then
    written[#written + 1] = 'error'
    written[#written + 1] = value
    for _, field in ipairs({ { 'error_type', args[6] }, { 'error_code', args[7] } }) do
      if field[2] and field[2] ~= '' then
        written[#written + 1] = field[1]
        written[#written + 1] = field[2]
      end
    end
  end
  local at = now()
  local group = { state[6], state[7], state[8], state[9] }
  if transitioned == 1 and may_settle_group(group, status) then
    redis.call('HSET', key, 'status', status)
    settle_group(base, session_key, key, task_id, state[1], status, at, group)
  end
  finish(base, session_key, key, task_id, state[1], at,
    { status = status, timed = state[4] or state[5], written = written })
  if paused_runner then
    redis.call('PUBLISH', channel_of(base, paused_runner), worker_message(base, task_id, state[1], '', '', 'ended'))
  end
  return { transitioned, 1 }
end

register('end', session_function(st_end))
