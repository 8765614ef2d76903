-- stv2_progress(session_key; inc, task_id, run, message, data): records a progress report on an unfinished run (run
-- "": the task's current run, for a report recorded by id):
-- the latest message, the count, and the report in the task's progress log, which keeps the session's `log_size`
-- latest (default DEFAULT_PROGRESS_LOG_SIZE, the core's) as fields "pl<number>". `data` is JSON text, or "" for
-- none.
-- Includes: clock, session, keys, tasks, events, register.

-- One report as its field holds it: "<at>:<message's byte length>:<message><data>", which `store.rs` reads.
local function progress_entry(at, message, data)
  return at .. ':' .. #message .. ':' .. message .. data
end

local function st_progress(keys, args)
  if not same_incarnation(args[1]) then return 0 end
  local base = base_of(keys[1])
  local key = task_key(base, args[2])
  local state = fields(key, 'run', 'fin', 'status', 'progress_count')
  if not state[1] or (args[3] ~= '' and state[1] ~= args[3]) or state[2] == '1' then return 0 end
  touch()
  local at = now()
  local count = (tonumber(state[4]) or 0) + 1
  local written = { 'progress', args[4], 'progress_count', digits(count) }
  local log_size = tonumber(redis.call('HGET', keys[1], 'log_size')) or DEFAULT_PROGRESS_LOG_SIZE
  if log_size > 0 then
    written[#written + 1] = 'pl' .. digits(count)
    written[#written + 1] = progress_entry(at, args[4], args[5] or '')
    if count > log_size then redis.call('HDEL', key, 'pl' .. digits(count - log_size)) end
  end
  redis.call('HSET', key, unpack(written))
  emit(base, args[2], 'progress', state[3], at, 'message', args[4])
  return 1
end

register('progress', session_function(st_progress))
