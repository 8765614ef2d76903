-- stv2_restore(session_key; inc, mode, then per task: task_id, field_count, field, value, ...): fills the session
-- with finished tasks exported from another (contract §6, export and restore), in order, each a new run counted
-- against the bound as it is written; the fields are the task hash's own (`store.rs` writes them from the snapshot
-- the core restored). A restore of many tasks goes as several calls of a few each (RedisSession::restore): every
-- call with mode "check" first, then every call with mode "skip".
-- - "all": refuses, writing nothing, with an error reply `<CODE> <index>` (the 0-based index of the task):
--   DUPLICATE_IN_BATCH for an id the list repeats, DUPLICATE for one the session retains; GONE and CLOSED as
--   stv2_open. Returns how many it restored.
-- - "check": the same refusals, and writes nothing in any case. Returns how many tasks it was given.
-- - "skip": writes each task whose id the session does not retain (one retained now was started, or restored,
--   since the check: it wins, as in memory), in a session closed since the check too. Returns how many it
--   restored.
-- Includes: session, keys, retention, register.
local function st_restore(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  local mode = args[2]
  -- A close that comes once the checks have passed comes after the restore, which writes on to its end.
  if stored_closed and mode ~= 'skip' then return redis.error_reply('CLOSED') end
  local base = base_of(session_key)
  local tasks = {}
  local named = {}
  local position = 3
  while position <= #args do
    local task_id, count = args[position], tonumber(args[position + 1])
    local index = #tasks
    if named[task_id] then return redis.error_reply('DUPLICATE_IN_BATCH ' .. index) end
    local retained = redis.call('EXISTS', task_key(base, task_id)) == 1
    if retained and mode ~= 'skip' then return redis.error_reply('DUPLICATE ' .. index) end
    named[task_id] = true
    if not retained then
      tasks[#tasks + 1] = { task_id = task_id, first = position + 2, last = position + 1 + 2 * count }
    end
    position = position + 2 + 2 * count
  end
  if mode == 'check' then return #tasks end
  if #tasks == 0 then return 0 end
  touch()
  for _, task in ipairs(tasks) do
    local run = next_run()
    local key = task_key(base, task.task_id)
    redis.call('HSET', key, 'id', task.task_id, 'run', run, 'fin', '1', unpack(args, task.first, task.last))
    retain(base, task.task_id)
  end
  return #tasks
end

register('restore', session_function(st_restore))
