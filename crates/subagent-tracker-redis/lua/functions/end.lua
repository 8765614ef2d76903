-- stv2_end(session_key; inc, caller, then each end: "c", task_id and run, for a completion without a result, or "e",
-- task_id, run, outcome, value, error_type and error_code): ends each run, in order and each on its own: the
-- runner's end (outcome completed, failed with the message as value and the failure's type and code, or stopped
-- with the reason as value), a dropped handle (dropped), an end recorded by id (run ""), or an expired claim
-- (claim_expired: fails only a queued task). The short form spares the server four arguments on the common path. Many
-- ends in one call are a batch (`RedisSession::end_batch`) or the ends of unrelated callers coalesced.
-- Returns per end 1 when it moved the task (to completed or failed), else 0: 0 too when the run had already
-- finished or is not the current one; then "walk" when an end's cascade (a task group's rule) was left under way,
-- for the caller to take its steps (`stv2_walk`); then "told" and a message when the ends' cascades told the
-- caller's worker process `caller` of its own runs (as stv2_cancel's). A call through an object of an ended
-- incarnation is refused with GONE (a runner's end takes that as 0).
-- An end by id of a paused run tells its worker process ("ended" as a notification's cause), whose runner waits
-- for a resume that will not come.
-- Includes: clock, session, keys, tasks, retention, cascade, task_groups, open, register.
local function end_one(base, a, first)
  local task_id, run, outcome, value, error_type, error_code = a[first + 1], a[first + 2], 'completed', '', '', ''
  if a[first] == 'e' then
    outcome, value, error_type, error_code = a[first + 3], a[first + 4], a[first + 5], a[first + 6]
  end
  local key = task_key(base, task_id)
  local state = fields(key, 'run', 'status', 'fin', 'on_end')
  local paused_runner = run == '' and state[2] == 'paused' and redis.call('HGET', key, 'worker')
  if not state[1] or state[3] == '1' or (run ~= '' and state[1] ~= run) then
    touch()
    return 0
  end
  local status = state[2]
  if outcome == 'claim_expired' then
    if status ~= 'queued' then
      touch()
      return 0
    end
    outcome = 'failed'
  elseif outcome == 'dropped' then
    -- A handle dropped without an end: a running task fails, a cancelled one just finishes.
    if PENDING[status] then outcome = 'failed' else outcome = 'stopped' end
  elseif outcome == 'stopped' and PENDING[status] then
    -- The runner stopped on a cancel this store has not seen (its own): the stop is a cancel, then the end.
    cancel_trees(base, { task_id }, value ~= '' and value or DEFAULT_CANCEL_REASON, 'requested', now())
    status = 'cancelled'
  end
  local transitioned = 0
  -- The end's fields go with `fin` in one HSET.
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
    if error_type ~= '' then add_field(written, 'error_type', error_type) end
    if error_code ~= '' then add_field(written, 'error_code', error_code) end
  end
  local at = now()
  -- Only a task that may start a group's rule (as its start recorded) has the group's fields read.
  if transitioned == 1 and may_start_group_rule(state[4]) then
    local group = fields(key, unpack(GROUP_FIELDS))
    if may_settle_group(group, status) then
      redis.call('HSET', key, 'status', status)
      settle_group(base, key, task_id, state[1], status, at, group)
    end
  end
  finish(base, key, task_id, state[1], at, status, has_timer(state[4]), written)
  if paused_runner then
    tell_worker(base, paused_runner, worker_message(base, task_id, state[1], '', '', 'ended'))
  end
  return transitioned
end

local function st_end(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local replies = {}
  tell_caller(args[2])
  local first = 3
  while first <= #args do
    replies[#replies + 1] = end_one(base, args, first)
    first = args[first] == 'c' and first + 3 or first + 7
  end
  if walks_left then replies[#replies + 1] = 'walk' end
  local told = told_caller()
  if told ~= '' then
    replies[#replies + 1] = 'told'
    replies[#replies + 1] = told
  end
  return replies
end

register('end', session_function(st_end))
