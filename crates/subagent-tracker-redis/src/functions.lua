#!lua name=subagent_tracker_v1
--[[
The transitions of subagent-tracker sessions stored in Redis: each function runs atomically on the server, so
the first transition out of a pending status wins across every process.

Keys. Every key of a session shares the session's hash tag, so a session lives in one cluster slot. KEYS[1] is
the session's hash (`<prefix>{<session>}:session`); the other keys are named from it:

  <base>session        hash: seq (start counter), retained (finished runs counted against the bound),
                       closed (the first close reason), max (max_finished_tasks), touched (the server's time of
                       the last change, in milliseconds)
  <base>t:<task>       hash: the task's current run (fields below)
  <base>c:<run>        set: ids of the attached children of run <run> (kept while the run is retained, so a
                       cascade walks through finished tasks to their pending descendants)
  <base>pending        sorted set: pending, uncancelled task ids by run
  <base>all            sorted set: retained task ids by run (start order)
  <base>finished       list: "<task>\t<run>" in the order runs finished; an entry whose run was replaced is stale
  <base>wr:<worker>    set: ids of the tasks whose current run the worker runs (started or claimed), until they
                       finish; what the reaper fails when the worker's lease expires
  <base>timers         sorted set: "d\t<task>\t<run>" (a deadline) and "c\t<task>\t<run>" (a claim timeout) by
                       when they fall due, in milliseconds since the epoch; `st_fire` fires the due ones
  <base>workers        set: the workers that ran tasks in the session (whose `wr:` sets to remove with it)
  <base>events         stream: the session's lifecycle events in the order they took effect, with ids 0-1, 0-2,
                       ..., so a reader that was trimmed past knows how many it missed; trimmed to about
                       EVENT_LIMIT entries

Task fields: id, run, status (queued|running|completed|failed|cancelled), fin ("1" once finished), parent, lp/lr
(the task whose children set holds this one, and its run), agent, description, metadata, detached, reserved,
worker, started_at, claimed_at, cancelled_at, ended_at, reason, origin, cause, result, error, progress,
progress_count, deadline (seconds) and due_ms, claim_error, parent_of ("1" once it has had attached children).

Cancels of tasks that a worker runs are published to "<prefix>worker:<id>", one message per worker and cancel,
each run as its session, task, run, reason, origin and cause (see `fields_message`); a lost message is found by
the worker's reconcile (`st_status`).
]]

local PENDING = { queued = true, running = true }
local EVENT_LIMIT = 10000

local function now()
  local time = redis.call('TIME')
  return string.format('%d.%06d', time[1], time[2])
end

local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function timer(kind, task_id, run) return kind .. '\t' .. task_id .. '\t' .. run end

-- Records a change of the session now: a session is idle from its last change.
local function touch(session_key)
  redis.call('HSET', session_key, 'touched', now_ms())
end

local function base_of(session_key)
  return string.sub(session_key, 1, #session_key - #'session')
end

local function task_key(base, task_id) return base .. 't:' .. task_id end
local function children_key(base, run) return base .. 'c:' .. run end

-- The prefix of worker channels: everything before the session's hash tag.
local function channel_of(base, worker)
  local prefix = string.match(base, '^(.-){')
  return prefix .. 'worker:' .. worker
end

local function fields(key, ...)
  return redis.call('HMGET', key, ...)
end

-- Appends one lifecycle event to the session's stream; `extra` is the reason or the progress message.
local function emit(base, task_id, kind, status, at, extra_name, extra)
  -- The entry id `0-<n>` numbers the session's events (the server picks n, one past the last), so a reader knows
  -- how many it missed from the ids alone.
  if extra_name then
    redis.call('XADD', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, '0-*', 'task', task_id, 'kind', kind,
      'status', status, 'at', at, extra_name, extra)
  else
    redis.call('XADD', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, '0-*', 'task', task_id, 'kind', kind,
      'status', status, 'at', at)
  end
end

-- A cascade's event for each task it cancels: untrimmed, since the cascade trims the stream once at its end.
local function emit_cancelled(base, task_id, at, reason)
  redis.call('XADD', base .. 'events', '0-*', 'task', task_id, 'kind', 'cancelled', 'status', 'cancelled',
    'at', at, 'reason', reason)
end

-- A run that leaves the retained window: its attached children move to its own parent's set (the nearest
-- retained ancestor adopts them), and it leaves its parent's set.
local function release_run(base, task_id, run)
  local key = task_key(base, task_id)
  local link = fields(key, 'lp', 'lr')
  local parent_id, parent_run = link[1], link[2]
  local parent_alive = false
  if parent_id then
    parent_alive = redis.call('HGET', task_key(base, parent_id), 'run') == parent_run
    redis.call('SREM', children_key(base, parent_run), task_id)
  end
  local children = redis.call('SMEMBERS', children_key(base, run))
  for _, child in ipairs(children) do
    local child_key = task_key(base, child)
    if parent_alive then
      redis.call('SADD', children_key(base, parent_run), child)
      redis.call('HSET', task_key(base, parent_id), 'parent_of', '1')
      redis.call('HSET', child_key, 'lp', parent_id, 'lr', parent_run)
    else
      redis.call('HDEL', child_key, 'lp', 'lr')
    end
  end
  redis.call('DEL', children_key(base, run))
end

-- Counts a finished run against the bound and evicts the oldest finished runs beyond it.
local function retain(base, session_key, task_id, run)
  redis.call('RPUSH', base .. 'finished', task_id .. '\t' .. run)
  local retained = redis.call('HINCRBY', session_key, 'retained', 1)
  local max = tonumber(redis.call('HGET', session_key, 'max'))
  while retained > max do
    local entry = redis.call('LPOP', base .. 'finished')
    if not entry then break end
    -- The run is digits, so the last tab separates it, whatever the id holds.
    local old_id, old_run = string.match(entry, '^(.*)\t(%d+)$')
    local old_key = task_key(base, old_id)
    if redis.call('HGET', old_key, 'run') == old_run then
      release_run(base, old_id, old_run)
      redis.call('DEL', old_key)
      redis.call('ZREM', base .. 'all', old_id)
      retained = redis.call('HINCRBY', session_key, 'retained', -1)
    end
  end
  -- Runs replaced by a restart of their id leave stale entries; drop them once they outnumber the retained.
  local listed = redis.call('LLEN', base .. 'finished')
  if listed > 2 * retained + 64 then
    local kept = {}
    for _, entry in ipairs(redis.call('LRANGE', base .. 'finished', 0, -1)) do
      local id, entry_run = string.match(entry, '^(.*)\t(%d+)$')
      local state = fields(task_key(base, id), 'run', 'fin')
      if state[1] == entry_run and state[2] == '1' then table.insert(kept, entry) end
    end
    redis.call('DEL', base .. 'finished')
    for first = 1, #kept, 1000 do
      redis.call('RPUSH', base .. 'finished', unpack(kept, first, math.min(first + 999, #kept)))
    end
  end
end

local function finish(base, session_key, key, task_id, run, at)
  redis.call('ZREM', base .. 'timers', timer('d', task_id, run), timer('c', task_id, run))
  local worker = redis.call('HGET', key, 'worker')
  if worker then redis.call('SREM', base .. 'wr:' .. worker, task_id) end
  redis.call('HSET', key, 'fin', '1', 'ended_at', at)
  redis.call('ZREM', base .. 'pending', task_id)
  emit(base, task_id, 'ended', redis.call('HGET', key, 'status'), at)
  retain(base, session_key, task_id, run)
end

-- A notification to a worker: each field as "<byte length>:<bytes>", so that no character of an id or a reason
-- can be mistaken for a separator.
local function fields_message(...)
  local parts = {}
  for index, field in ipairs({ ... }) do
    parts[index] = #field .. ':' .. field
  end
  return table.concat(parts)
end

-- Cancels pending roots and their pending descendants. Returns how many moved. `cause` is recorded on each
-- root, "parent" on descendants (naming the root as origin); "session" makes every task its own origin.
local function cancel_trees(base, session_key, roots, reason, cause, at)
  local moved = 0
  -- One message per worker, however many of its runs the cancel reaches.
  local notifications = {}
  -- Removed from the pending index in batches, not one call per task.
  local unlisted = {}
  local unclaimed = {}
  local session_field = fields_message(string.sub(base, string.find(base, '{', 1, true) + 1, -3))
  for _, root in ipairs(roots) do
    local tails = {}
    local stack = { root }
    while #stack > 0 do
      local task_id = table.remove(stack)
      local key = task_key(base, task_id)
      local state = fields(key, 'status', 'run', 'worker', 'parent_of')
      local status, run, worker, parent_of = state[1], state[2], state[3], state[4]
      if status and PENDING[status] then
        local entry_cause, origin = cause, root
        if cause == 'session' then origin = task_id
        elseif task_id ~= root then entry_cause = 'parent' end
        redis.call('HSET', key, 'status', 'cancelled', 'cancelled_at', at, 'reason', reason,
          'origin', origin, 'cause', entry_cause)
        table.insert(unlisted, task_id)
        moved = moved + 1
        emit_cancelled(base, task_id, at, reason)
        if status == 'queued' then
          -- Finished after the walk: finishing may evict runs whose children the walk has yet to reach.
          table.insert(unclaimed, { key = key, task_id = task_id, run = run })
        elseif worker then
          local messages = notifications[worker]
          if not messages then
            messages = {}
            notifications[worker] = messages
          end
          -- Framing each message's fields anew took a third of a 10,000-task cascade: the session, reason,
          -- origin and cause are framed once per root and cause instead (a session cancel, whose every task is
          -- its own origin, frames each).
          local tail = tails[entry_cause]
          if not tail or cause == 'session' then
            tail = fields_message(reason, origin, entry_cause)
            tails[entry_cause] = tail
          end
          messages[#messages + 1] = session_field .. #task_id .. ':' .. task_id .. #run .. ':' .. run .. tail
        end
      end
      -- Only a task that ever had attached children has a set to walk (`parent_of`).
      if status and parent_of and cause ~= 'session' then
        for _, child in ipairs(redis.call('SMEMBERS', children_key(base, run))) do
          table.insert(stack, child)
        end
      end
    end
  end
  for first = 1, #unlisted, 1000 do
    redis.call('ZREM', base .. 'pending', unpack(unlisted, first, math.min(first + 999, #unlisted)))
  end
  table.sort(unclaimed, function(left, right) return tonumber(left.run) < tonumber(right.run) end)
  for _, task in ipairs(unclaimed) do
    finish(base, session_key, task.key, task.task_id, task.run, at)
  end
  -- LIMIT 0: a trim otherwise removes at most 100 nodes' worth of entries, less than a large cascade added.
  redis.call('XTRIM', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, 'LIMIT', 0)
  for worker, messages in pairs(notifications) do
    redis.call('PUBLISH', channel_of(base, worker), table.concat(messages))
  end
  return moved
end

-- st_open(session_key; task_id, parent_id, agent, description, metadata, detached, reserved, worker,
-- deadline_ms, max_finished, claim_timeout_ms, claim_error, deadline_reason): a start or a reservation, with an
-- optional deadline (milliseconds since the epoch; a child's is bounded by its parent's unless detached) and, for
-- a reservation, a claim timeout. Returns {run, status, reason, next timer due or "", "1" if this made the
-- session} or an error reply whose
-- message starts with DUPLICATE, UNKNOWN_PARENT, PARENT_FINISHED or CLOSED.
local function st_open(keys, args)
  touch(keys[1])
  local session_key = keys[1]
  local base = base_of(session_key)
  local task_id, parent_id, agent, description, metadata = args[1], args[2], args[3], args[4], args[5]
  local detached, reserved, worker, deadline = args[6] == '1', args[7] == '1', args[8], args[9]
  local created = redis.call('HSETNX', session_key, 'max', args[10])
  if redis.call('HEXISTS', session_key, 'closed') == 1 then
    return redis.error_reply('CLOSED')
  end
  local key = task_key(base, task_id)
  local old = fields(key, 'run', 'fin')
  if old[1] and old[2] ~= '1' then
    return redis.error_reply('DUPLICATE')
  end
  local inherited = nil
  local parent_run = nil
  if parent_id ~= '' then
    local parent = fields(task_key(base, parent_id), 'run', 'fin', 'status', 'reason', 'origin', 'due_ms')
    if not parent[1] then return redis.error_reply('UNKNOWN_PARENT') end
    if parent[2] == '1' then return redis.error_reply('PARENT_FINISHED') end
    parent_run = parent[1]
    if parent[3] == 'cancelled' and not detached then
      inherited = { reason = parent[4], origin = parent[5] }
    end
    if parent[6] and not detached then
      local bound = tonumber(parent[6])
      if deadline == '' or bound < tonumber(deadline) then deadline = parent[6] end
    end
  end
  if old[1] then
    -- A finished run of this id is replaced: it stops counting against the bound now.
    release_run(base, task_id, old[1])
    redis.call('DEL', key)
    redis.call('HINCRBY', session_key, 'retained', -1)
  end
  local run = redis.call('HINCRBY', session_key, 'seq', 1)
  local at = now()
  local status = reserved and 'queued' or 'running'
  redis.call('HSET', key, 'id', task_id, 'run', run, 'status', status, 'started_at', at)
  local optional = { parent = parent_id, agent = agent, description = description, metadata = metadata,
    worker = worker }
  for name, value in pairs(optional) do
    if value ~= '' then redis.call('HSET', key, name, value) end
  end
  if detached then redis.call('HSET', key, 'detached', '1') end
  if reserved then redis.call('HSET', key, 'reserved', '1') end
  if worker ~= '' then
    redis.call('SADD', base .. 'wr:' .. worker, task_id)
    redis.call('SADD', base .. 'workers', worker)
  end
  if parent_run and not detached then
    redis.call('SADD', children_key(base, parent_run), task_id)
    redis.call('HSET', task_key(base, parent_id), 'parent_of', '1')
    redis.call('HSET', key, 'lp', parent_id, 'lr', parent_run)
  end
  redis.call('ZADD', base .. 'all', run, task_id)
  local reason = ''
  if inherited then
    redis.call('HSET', key, 'status', 'cancelled', 'cancelled_at', at, 'reason', inherited.reason,
      'origin', inherited.origin, 'cause', 'parent')
    emit(base, task_id, 'started', 'cancelled', at, 'reason', inherited.reason)
    emit(base, task_id, 'cancelled', 'cancelled', at, 'reason', inherited.reason)
    if reserved then
      finish(base, session_key, key, task_id, run, at)
    end
    status = 'cancelled'
    reason = inherited.reason
  else
    redis.call('ZADD', base .. 'pending', run, task_id)
    emit(base, task_id, 'started', status, at)
  end
  local next_due = ''
  if deadline ~= '' then
    local due = tonumber(deadline)
    redis.call('HSET', key, 'due_ms', deadline, 'deadline', string.format('%.3f', due / 1000))
    if due <= now_ms() then
      if PENDING[status] then
        cancel_trees(base, session_key, { task_id }, args[13], 'deadline', at)
        status = 'cancelled'
        reason = args[13]
      end
    else
      redis.call('ZADD', base .. 'timers', due, timer('d', task_id, run))
      next_due = deadline
    end
  end
  if reserved and args[11] ~= '' and status == 'queued' then
    local due = now_ms() + tonumber(args[11])
    redis.call('HSET', key, 'claim_error', args[12])
    redis.call('ZADD', base .. 'timers', due, timer('c', task_id, run))
    if next_due == '' or due < tonumber(next_due) then next_due = tostring(due) end
  end
  return { run, status, reason, next_due, tostring(created) }
end

-- st_cancel(session_key; task_id, reason, cause): a cancel of one task and its pending descendants. Returns
-- 1 when the task itself moved, 0 otherwise.
local function st_cancel(keys, args)
  touch(keys[1])
  local session_key = keys[1]
  local base = base_of(session_key)
  local key = task_key(base, args[1])
  local status = redis.call('HGET', key, 'status')
  if not status or not PENDING[status] then return 0 end
  cancel_trees(base, session_key, { args[1] }, args[2], args[3], now())
  return 1
end

-- st_cancel_all(session_key; reason, close): cancels every pending task; with close = "1", first records the
-- session as closed (keeping the first reason). Returns how many moved.
local function st_cancel_all(keys, args)
  touch(keys[1])
  local session_key = keys[1]
  local base = base_of(session_key)
  local reason = args[1]
  if args[2] == '1' then
    redis.call('HSETNX', session_key, 'closed', reason)
    reason = redis.call('HGET', session_key, 'closed')
  end
  local roots = redis.call('ZRANGE', base .. 'pending', 0, -1)
  return cancel_trees(base, session_key, roots, reason, 'session', now())
end

-- st_end(session_key; task_id, run, outcome, value): the runner's end (outcome completed, failed, or stopped with
-- the reason as value), a dropped handle (dropped), an end recorded by id (run ""), or an expired claim
-- (claim_expired: fails only a queued task).
-- Returns {transitioned, finished_now}: {0, 0} when the run had already finished or is not the current one.
local function st_end(keys, args)
  touch(keys[1])
  local session_key = keys[1]
  local base = base_of(session_key)
  local task_id, run, outcome, value = args[1], args[2], args[3], args[4]
  local key = task_key(base, task_id)
  local state = fields(key, 'run', 'status', 'fin')
  if not state[1] or state[3] == '1' or (run ~= '' and state[1] ~= run) then return { 0, 0 } end
  local status = state[2]
  if outcome == 'claim_expired' then
    if status ~= 'queued' then return { 0, 0 } end
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
  if PENDING[status] and outcome ~= 'stopped' then
    redis.call('HSET', key, 'status', outcome)
    transitioned = 1
  end
  if outcome == 'completed' and value ~= '' then
    redis.call('HSET', key, 'result', value)
  elseif outcome == 'failed' then
    redis.call('HSET', key, 'error', value)
  end
  finish(base, session_key, key, task_id, state[1], now())
  return { transitioned, 1 }
end

-- st_claim(session_key; task_id, worker): a runner takes a reserved task. Returns {run, status, reason}; errors
-- UNKNOWN, CLAIMED or ENDED <status>.
local function st_claim(keys, args)
  touch(keys[1])
  local base = base_of(keys[1])
  local key = task_key(base, args[1])
  local state = fields(key, 'run', 'status', 'reserved', 'claimed_at', 'reason')
  if not state[1] then return redis.error_reply('UNKNOWN') end
  if state[3] ~= '1' or state[4] then return redis.error_reply('CLAIMED') end
  local status = state[2]
  if status ~= 'queued' and status ~= 'cancelled' then return redis.error_reply('ENDED ' .. status) end
  if status == 'queued' then status = 'running' end
  local at = now()
  redis.call('ZREM', base .. 'timers', timer('c', args[1], state[1]))
  redis.call('HSET', key, 'status', status, 'claimed_at', at, 'worker', args[2])
  if status == 'running' then
    redis.call('SADD', base .. 'wr:' .. args[2], args[1])
    redis.call('SADD', base .. 'workers', args[2])
  end
  emit(base, args[1], 'claimed', status, at)
  return { state[1], status, state[5] or '' }
end

-- st_progress(session_key; task_id, run, message): records a progress message on an unfinished run.
local function st_progress(keys, args)
  touch(keys[1])
  local base = base_of(keys[1])
  local key = task_key(base, args[1])
  local state = fields(key, 'run', 'fin', 'status')
  if state[1] ~= args[2] or state[2] == '1' then return 0 end
  redis.call('HSET', key, 'progress', args[3])
  redis.call('HINCRBY', key, 'progress_count', 1)
  emit(base, args[1], 'progress', state[3], now(), 'message', args[3])
  return 1
end

-- st_escalate(session_key; task_id, run): records that the run's runner was stopped by force after its grace
-- (snapshots show it as escalated). Returns 1, or 0 when that run is no longer the task's current one.
local function st_escalate(keys, args)
  local key = task_key(base_of(keys[1]), args[1])
  if redis.call('HGET', key, 'run') ~= args[2] then return 0 end
  redis.call('HSET', key, 'escalated', '1')
  return 1
end

local function snapshot(base, task_id)
  return redis.call('HGETALL', task_key(base, task_id))
end

-- st_get(session_key; task_id): the task's fields as a flat list, empty when not retained.
local function st_get(keys, args)
  return snapshot(base_of(keys[1]), args[1])
end

-- st_list(session_key; which): the fields of every pending ("pending") or retained ("all") task, in start order.
local function st_list(keys, args)
  local base = base_of(keys[1])
  local listed = {}
  for _, task_id in ipairs(redis.call('ZRANGE', base .. args[1], 0, -1)) do
    table.insert(listed, snapshot(base, task_id))
  end
  return listed
end

-- st_status(session_key; task_id, run, ...): for each run a worker runs, {status, reason, origin, cause}, or
-- {"gone"} when that run is no longer the task's current one.
local function st_status(keys, args)
  local base = base_of(keys[1])
  local statuses = {}
  for index = 1, #args, 2 do
    local state = fields(task_key(base, args[index]), 'run', 'status', 'reason', 'origin', 'cause')
    if state[1] ~= args[index + 1] then
      table.insert(statuses, { 'gone' })
    else
      table.insert(statuses, { state[2], state[3] or '', state[4] or '', state[5] or '' })
    end
  end
  return statuses
end

-- Deletes every key of a session.
local function remove_session(base, session_key)
  for _, task_id in ipairs(redis.call('ZRANGE', base .. 'all', 0, -1)) do
    local key = task_key(base, task_id)
    local run = redis.call('HGET', key, 'run')
    if run then redis.call('DEL', children_key(base, run)) end
    redis.call('DEL', key)
  end
  for _, worker in ipairs(redis.call('SMEMBERS', base .. 'workers')) do
    redis.call('DEL', base .. 'wr:' .. worker)
  end
  redis.call('DEL', session_key, base .. 'pending', base .. 'all', base .. 'finished', base .. 'events',
    base .. 'timers', base .. 'workers')
end

-- st_session(session_key): {closed ("1" or "0"), unfinished task count}, or {} for no session.
local function st_session(keys)
  local base = base_of(keys[1])
  if redis.call('EXISTS', keys[1]) == 0 then return {} end
  local retained = tonumber(redis.call('HGET', keys[1], 'retained') or '0')
  return { redis.call('HEXISTS', keys[1], 'closed'), redis.call('ZCARD', base .. 'all') - retained }
end

-- st_touch(session_key; max_finished): makes the session exist, with its bound unless it has one. Returns
-- {closed ("1" or "0"), unfinished task count}.
local function st_touch(keys, args)
  local state = st_session(keys)
  if state[1] == 1 and state[2] == 0 then
    -- Closed, with every task finished: the session has left, and its id names a new one.
    remove_session(base_of(keys[1]), keys[1])
  end
  redis.call('HSETNX', keys[1], 'max', args[1])
  touch(keys[1])
  return st_session(keys)
end

-- st_reap(session_key; worker, error, expired_at_ms): the worker's lease expired at `expired_at_ms`. Its running
-- tasks begun before then fail with `error`, its cancelled ones become finished. Returns how many it finished.
local function st_reap(keys, args)
  touch(keys[1])
  local session_key = keys[1]
  local base = base_of(session_key)
  local held = base .. 'wr:' .. args[1]
  local reaped = 0
  local at = now()
  local expired_at = tonumber(args[3])
  for _, task_id in ipairs(redis.call('SMEMBERS', held)) do
    local key = task_key(base, task_id)
    local state = fields(key, 'run', 'status', 'fin', 'worker', 'started_at', 'claimed_at')
    local since = tonumber(state[7] or state[6] or '0') * 1000
    -- A run begun after the lease expired is the work of a worker that came back: not the lost one's.
    if state[1] and state[3] ~= '1' and state[4] == args[1] and since < expired_at then
      if state[2] == 'running' then
        redis.call('HSET', key, 'status', 'failed', 'error', args[2])
      end
      finish(base, session_key, key, task_id, state[1], at)
      reaped = reaped + 1
    end
  end
  return reaped
end

-- st_orphans(session_key; worker, grace_ms, error, held...): the runs recorded as the worker's that it does not
-- hold (its start or claim took effect but the reply never reached it), once older than `grace_ms`: a running
-- one fails with `error`, a cancelled one finishes. Returns how many it ended.
local function st_orphans(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  local worker, grace, error = args[1], tonumber(args[2]), args[3]
  local held = {}
  for index = 4, #args do held[args[index]] = true end
  local ended = 0
  local current_ms = now_ms()
  for _, task_id in ipairs(redis.call('SMEMBERS', base .. 'wr:' .. worker)) do
    if not held[task_id] then
      local key = task_key(base, task_id)
      local state = fields(key, 'run', 'status', 'fin', 'worker', 'started_at', 'claimed_at')
      local since = tonumber(state[6] or state[5] or '0') * 1000
      if state[1] and state[3] ~= '1' and state[4] == worker and current_ms - since > grace then
        touch(session_key)
        if state[2] == 'running' then
          redis.call('HSET', key, 'status', 'failed', 'error', error)
        end
        finish(base, session_key, key, task_id, state[1], now())
        ended = ended + 1
      end
    end
  end
  return ended
end

-- st_lease(workers_key; worker, lease_ms): renews the worker's lease to `lease_ms` from the server's clock.
local function st_lease(keys, args)
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('ZADD', keys[1], now_ms + tonumber(args[2]), args[1])
  return now_ms
end

-- st_forget(workers_key; worker): drops a reaped worker's lease, unless it renewed meanwhile (it came back).
local function st_forget(keys, args)
  local expiry = tonumber(redis.call('ZSCORE', keys[1], args[1]))
  if expiry and expiry <= now_ms() then return redis.call('ZREM', keys[1], args[1]) end
  return 0
end

-- st_expired(workers_key): the workers whose lease has passed, by the server's clock, each with its expiry.
local function st_expired(keys)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms(), 'WITHSCORES')
end

-- st_fire(session_key; deadline_reason): fires the session's due timers: a deadline cancels its task's tree (cause
-- deadline), a claim timeout fails a task still queued. Returns when the next timer falls due, or -1.
local function st_fire(keys, args)
  touch(keys[1])
  local session_key = keys[1]
  local base = base_of(session_key)
  local at = now()
  local due = {}
  local listed = redis.call('ZRANGEBYSCORE', base .. 'timers', '-inf', now_ms(), 'WITHSCORES')
  for index = 1, #listed, 2 do
    local kind, task_id, run = string.match(listed[index], '^(%a)\t(.*)\t(%d+)$')
    table.insert(due, { member = listed[index], at = tonumber(listed[index + 1]), kind = kind, task_id = task_id,
      run = run })
  end
  -- Timers due at one instant fire in start order, so a parent's deadline reaches its children (which share
  -- it) as a cascade, as in memory.
  table.sort(due, function(left, right)
    if left.at ~= right.at then return left.at < right.at end
    return tonumber(left.run) < tonumber(right.run)
  end)
  for _, entry in ipairs(due) do
    local member, kind, task_id, run = entry.member, entry.kind, entry.task_id, entry.run
    redis.call('ZREM', base .. 'timers', member)
    local key = task_key(base, task_id)
    local state = fields(key, 'run', 'status', 'claim_error')
    if state[1] == run then
      if kind == 'd' and PENDING[state[2]] then
        cancel_trees(base, session_key, { task_id }, args[1], 'deadline', at)
      elseif kind == 'c' and state[2] == 'queued' then
        redis.call('HSET', key, 'status', 'failed', 'error', state[3] or 'claim timeout')
        finish(base, session_key, key, task_id, run, at)
      end
    end
  end
  local next_timer = redis.call('ZRANGE', base .. 'timers', 0, 0, 'WITHSCORES')
  if next_timer[2] then return tonumber(next_timer[2]) end
  return -1
end

-- st_due(timers_key): the sessions with a timer due, by the server's clock.
local function st_due(keys)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms())
end

-- st_retime(timers_key; session_id, next): records when the session's next timer falls due (-1: none), unless
-- a newer timer of the session was recorded meanwhile.
local function st_retime(keys, args)
  local current = tonumber(redis.call('ZSCORE', keys[1], args[1]))
  local next_due = tonumber(args[2])
  local due_now = current and current <= now_ms()
  if next_due < 0 then
    if due_now then redis.call('ZREM', keys[1], args[1]) end
  elseif not current or due_now or next_due < current then
    redis.call('ZADD', keys[1], next_due, args[1])
  end
  return 1
end

-- st_idle(sessions_key; ttl_ms): sessions of the index whose recorded last change is older than `ttl_ms`, by the
-- server's clock: the candidates for `st_sweep` (at most 100 per call).
local function st_idle(keys, args)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms() - tonumber(args[1]), 'LIMIT', 0, 100)
end

-- st_sweep(session_key; ttl_ms): removes the session, every key of it, if nothing changed in it for `ttl_ms`
-- and none of its tasks is unfinished. Returns -1 when removed, otherwise the time of its last change (or 0 for
-- a session that does not exist).
local function st_sweep(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  local touched = tonumber(redis.call('HGET', session_key, 'touched') or '0')
  if redis.call('EXISTS', session_key) == 0 then return 0 end
  local retained = tonumber(redis.call('HGET', session_key, 'retained') or '0')
  local unfinished = redis.call('ZCARD', base .. 'all') - retained
  if now_ms() - touched < tonumber(args[1]) or unfinished > 0 then return touched end
  remove_session(base, session_key)
  return -1
end

-- st_unlock(lock_key; holder): releases a lock only if `holder` still holds it.
local function st_unlock(keys, args)
  if redis.call('GET', keys[1]) == args[1] then return redis.call('DEL', keys[1]) end
  return 0
end

redis.register_function('st_fire', st_fire)
redis.register_function{ function_name = 'st_due', callback = st_due, flags = { 'no-writes' } }
redis.register_function('st_retime', st_retime)
redis.register_function('st_reap', st_reap)
redis.register_function('st_orphans', st_orphans)
redis.register_function('st_unlock', st_unlock)
redis.register_function('st_sweep', st_sweep)
redis.register_function{ function_name = 'st_idle', callback = st_idle, flags = { 'no-writes' } }
redis.register_function('st_lease', st_lease)
redis.register_function('st_forget', st_forget)
redis.register_function{ function_name = 'st_expired', callback = st_expired, flags = { 'no-writes' } }
redis.register_function('st_open', st_open)
redis.register_function('st_touch', st_touch)
redis.register_function('st_cancel', st_cancel)
redis.register_function('st_cancel_all', st_cancel_all)
redis.register_function('st_end', st_end)
redis.register_function('st_claim', st_claim)
redis.register_function('st_progress', st_progress)
redis.register_function('st_escalate', st_escalate)
redis.register_function{ function_name = 'st_get', callback = st_get, flags = { 'no-writes' } }
redis.register_function{ function_name = 'st_list', callback = st_list, flags = { 'no-writes' } }
redis.register_function{ function_name = 'st_status', callback = st_status, flags = { 'no-writes' } }
redis.register_function{ function_name = 'st_session', callback = st_session, flags = { 'no-writes' } }
