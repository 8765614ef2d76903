-- stv2_resume(session_key; inc, task_id, caller[, value]): the session resumes a paused task (contract §5, pause and
-- resume): status "running" again, the pause reason cleared, and `value` (JSON text) kept as `resume_value` for the
-- runner. The worker process that runs the task is told on its channel, in a cancel's framing with the value as
-- the reason and "resume" as the cause, and reads `resume_value` when it reconciles. Returns {1, or 0 when the task
-- is not paused; what it told the caller's worker process `caller` (as stv2_cancel's)}. Rust: RedisSession::resume.
-- Includes: clock, session, keys, tasks, events, cascade, register.
local function st_resume(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local task_id = args[2]
  local key = task_key(base, task_id)
  local state = fields(key, 'status', 'run', 'worker', 'pauses')
  if state[1] ~= 'paused' then return { 0, '' } end
  touch()
  tell_caller(args[3])
  local value = args[4]
  if value then
    redis.call('HSET', key, 'status', 'running', 'resume_value', value)
  else
    redis.call('HSET', key, 'status', 'running')
    redis.call('HDEL', key, 'resume_value')
  end
  redis.call('HDEL', key, 'pause_reason')
  emit(base, task_id, 'resumed', 'running', now())
  if state[3] then
    tell_worker(base, state[3], worker_message(base, task_id, state[2], value or '', state[4] or '0', 'resume'))
  end
  return { 1, told_caller() }
end

register('resume', session_function(st_resume))
