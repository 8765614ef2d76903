#!lua name=subagent_tracker_v2
--[[
The transitions of subagent-tracker sessions stored in Redis: each function runs atomically on the server, so
the first transition out of a pending status wins across every process.

Version. The library's name, its function names (`stv2_*`) and the key layout (`<prefix>v2:...`) carry one version
together: a library of another version loads beside this one, calls none of its functions and reads none of its
keys, so two fleets of different versions never run each other's rules (see docs/across-processes.md).

Keys. Every key of a session shares the session's hash tag, `{s:<session>}`, with the session's id percent-encoded
(`%`, `{` and `}` only), so no id can close the tag early or reach another session's keys, and a session lives in
one cluster slot. Registry-wide keys share the tag `{registry}`. Every function touches the keys of one slot. KEYS[1]
is the session's hash (`<prefix>v2:{s:<session>}:session`); the session's other keys are named from it:

  <base>session        hash: inc (the incarnation: the server's clock in milliseconds times 1000 when the
                       session's keys were made; run numbers count on from it, event ids start with it), seq (the
                       last run number),
                       retained (finished runs counted against the bound), closed (the first close reason), max
                       (max_finished_tasks), touched (the server's time of the last change, in milliseconds)
  <base>t:<task>       hash: the task's current run (fields below)
  <base>c:<run>        set: ids of the attached children of run <run> (kept while the run is retained, so a
                       cascade walks through finished tasks to their pending descendants)
  <base>live           sorted set: the ids of unfinished tasks (queued, running, or cancelled with their runner
                       yet to stop) by run, from the start to the end
  <base>finished       list: "<task>\t<run>" in the order runs finished; an entry whose run was replaced is stale
  <base>timers         sorted set: "d\t<task>\t<run>" (a deadline) and "c\t<task>\t<run>" (a claim timeout) by
                       when they fall due, in milliseconds since the epoch; `stv2_fire` fires the due ones
  <base>events         stream: the session's lifecycle events in the order they took effect, with ids <inc>-0,
                       <inc>-1, ..., so a reader that was trimmed past knows how many it missed, and a reader of an
                       earlier incarnation knows its session is gone; trimmed to about EVENT_LIMIT entries

A task lives in as few keys as the rules need, because each key a lifecycle writes is a server call, and the calls
are what a lifecycle costs the server: its hash, the live index while unfinished, the finished list once finished,
and its events. The retained tasks in start order are the live index and the finished list merged by run; the
tasks a worker process runs are the live ones whose `worker` field names it (the reaper reads them from the live
index, which is rare work, rather than every lifecycle keeping a set per process).

Run numbers are unique across the incarnations of a session id and across server restarts: each incarnation
counts from the server's clock (times 1000, far above the starts a session can make per millisecond), so a
runner, a notification or an end of an earlier incarnation never matches a run of a later one.

A worker process is named by its own key: the worker id users gave, a slash and a per-process nonce. It names the
process's lease, its runs (their `worker` field) and its channel, so that two processes given one id never take
each other's runs for their own; snapshots show the id alone.

Task fields: id, run, status (queued|running|completed|failed|cancelled), fin ("1" once finished), parent, lp/lr
(the task whose children set holds this one, and its run), agent, description, metadata, detached, reserved,
worker (the process that runs it), started_at, claimed_at, cancelled_at, ended_at, reason, origin, cause, result, error, progress,
progress_count, deadline (seconds) and due_ms, claim_error, parent_of ("1" once it has had attached children).

Cancels of tasks that a worker process runs are published to "<prefix>v2:worker:<process>", one message per
process and cancel, each run as its session (as encoded in the keys), task, run, reason, origin and cause (see
`fields_message`); a lost message is found by the process's reconcile (`stv2_status`).

Every session function takes as its first argument the incarnation that the caller's session object belongs to
('' where the caller follows whatever incarnation is there: a worker's housekeeping). A transition or query for
another incarnation, or for a session whose keys are gone, is refused with GONE: the caller's session has ended.
]]

local PENDING = { queued = true, running = true }
local EVENT_LIMIT = 10000

-- The server's clock, read once per function call (`register` forgets it between calls): a transition happens at
-- one instant, and each `TIME` is a call of its own.
local clock = nil

local function read_clock()
  if not clock then clock = redis.call('TIME') end
  return clock
end

local function now()
  local time = read_clock()
  return string.format('%d.%06d', time[1], time[2])
end

local function now_ms()
  local time = read_clock()
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A whole number as its decimal digits: Lua's own conversion writes numbers past 10^14 in exponent form.
local function digits(number) return string.format('%d', number) end

-- The incarnation of the session the running function works on (false for none), read once per call by
-- `session_function`, and the id of its next event.
local stored_inc = false
local event_id = nil
-- The session's first close reason (false while open) and its bound on finished runs, read with the incarnation:
-- neither changes during a call that did not write it.
local stored_closed = false
local stored_max = nil
-- The session's last run number and its count of retained runs, read with the incarnation and kept current by the
-- function's own writes (`record_change`), so that a start or an end changes the session's hash in one call.
local stored_seq = nil
local stored_retained = 0

-- Wraps a function of one session: it knows the session's incarnation, and its events get ids of it.
local function session_function(callback)
  return function(keys, args)
    local session = redis.call('HMGET', keys[1], 'inc', 'closed', 'max', 'seq', 'retained')
    stored_inc, stored_closed, stored_max = session[1], session[2], tonumber(session[3])
    stored_seq, stored_retained = tonumber(session[4]), tonumber(session[5]) or 0
    event_id = stored_inc and (stored_inc .. '-*') or nil
    return callback(keys, args)
  end
end

-- True when the caller's session object (incarnation `inc`, '' for any) is the session the function works on.
local function same_incarnation(inc)
  return stored_inc ~= false and (inc == '' or stored_inc == inc)
end

local function gone() return redis.error_reply('GONE') end

local function timer(kind, task_id, run) return kind .. '\t' .. task_id .. '\t' .. run end

-- Records a change of the session now (a session is idle from its last change), with the session's fields the
-- change sets (`...`: field, value, ...) in the same call.
local function record_change(session_key, ...)
  redis.call('HSET', session_key, 'touched', digits(now_ms()), ...)
end

local function touch(session_key)
  record_change(session_key)
end

local function base_of(session_key)
  return string.sub(session_key, 1, #session_key - #'session')
end

local function task_key(base, task_id) return base .. 't:' .. task_id end
local function children_key(base, run) return base .. 'c:' .. run end

-- The channel of a worker process: the keys' prefix (everything before the session's hash tag) names it too.
local function channel_of(base, process)
  local prefix = string.match(base, '^(.-){')
  return prefix .. 'worker:' .. process
end

local function fields(key, ...)
  return redis.call('HMGET', key, ...)
end

-- Appends one lifecycle event to the session's stream; `extra` is the reason or the progress message.
local function emit(base, task_id, kind, status, at, extra_name, extra)
  -- The entry id `<inc>-<n>` numbers the session's events (the server picks n: 0, then one past the last), so a
  -- reader knows how many it missed from the ids alone.
  if extra_name then
    redis.call('XADD', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, event_id, 'task', task_id, 'kind', kind,
      'status', status, 'at', at, extra_name, extra)
  else
    redis.call('XADD', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, event_id, 'task', task_id, 'kind', kind,
      'status', status, 'at', at)
  end
end

-- A cascade's event for each task it cancels: untrimmed, since the cascade trims the stream once at its end.
local function emit_cancelled(base, task_id, at, reason)
  redis.call('XADD', base .. 'events', event_id, 'task', task_id, 'kind', 'cancelled', 'status', 'cancelled',
    'at', at, 'reason', reason)
end

-- A run that leaves the retained window: its attached children move to its own parent's set (the nearest
-- retained ancestor adopts them), and it leaves its parent's set. `known` holds its fields run, lp, lr and
-- parent_of when the caller has read them.
local function release_run(base, task_id, run, known)
  local key = task_key(base, task_id)
  local link = known or fields(key, 'run', 'lp', 'lr', 'parent_of')
  local parent_id, parent_run = link[2], link[3]
  local parent_alive = false
  if parent_id then
    parent_alive = redis.call('HGET', task_key(base, parent_id), 'run') == parent_run
    redis.call('SREM', children_key(base, parent_run), task_id)
  end
  -- Only a run that ever had attached children has a set (`parent_of`).
  if not link[4] then return end
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
  local listed = redis.call('RPUSH', base .. 'finished', task_id .. '\t' .. run)
  local retained = stored_retained + 1
  local max = stored_max or tonumber(redis.call('HGET', session_key, 'max'))
  while retained > max do
    local entry = redis.call('LPOP', base .. 'finished')
    if not entry then break end
    listed = listed - 1
    -- The run is digits, so the last tab separates it, whatever the id holds.
    local old_id, old_run = string.match(entry, '^(.*)\t(%d+)$')
    local old_key = task_key(base, old_id)
    local old = fields(old_key, 'run', 'lp', 'lr', 'parent_of')
    if old[1] == old_run then
      release_run(base, old_id, old_run, old)
      redis.call('DEL', old_key)
      retained = retained - 1
    end
  end
  stored_retained = retained
  record_change(session_key, 'retained', digits(retained))
  -- Runs replaced by a restart of their id leave stale entries; drop them once they outnumber the retained.
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

-- Finishes a run: its timers go, it leaves the live index, its `ended` event is emitted, and it counts against the
-- bound. `ending` is what the caller knows: {status = the status it ends with, timed = whether it had a deadline or
-- a claim timeout, written = {field, value, ...} to store with `fin` in the same call}; nil to read the status and
-- the timers here.
local function finish(base, session_key, key, task_id, run, at, ending)
  if not ending then
    local state = fields(key, 'status', 'due_ms', 'claim_error')
    ending = { status = state[1], timed = state[2] or state[3] }
  end
  if ending.timed then
    redis.call('ZREM', base .. 'timers', timer('d', task_id, run), timer('c', task_id, run))
  end
  redis.call('HSET', key, 'fin', '1', 'ended_at', at, unpack(ending.written or {}))
  redis.call('ZREM', base .. 'live', task_id)
  emit(base, task_id, 'ended', ending.status, at)
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
  local unclaimed = {}
  -- The session as its keys encode it (between `{s:` and `}:`); the worker decodes it.
  local session_field = fields_message(string.sub(base, string.find(base, '{', 1, true) + 3, -3))
  for _, root in ipairs(roots) do
    local tails = {}
    local stack = { root }
    while #stack > 0 do
      local task_id = table.remove(stack)
      local key = task_key(base, task_id)
      local state = fields(key, 'status', 'run', 'worker', 'parent_of', 'due_ms', 'claim_error')
      local status, run, process, parent_of = state[1], state[2], state[3], state[4]
      if status and PENDING[status] then
        local entry_cause, origin = cause, root
        if cause == 'session' then origin = task_id
        elseif task_id ~= root then entry_cause = 'parent' end
        redis.call('HSET', key, 'status', 'cancelled', 'cancelled_at', at, 'reason', reason,
          'origin', origin, 'cause', entry_cause)
        moved = moved + 1
        emit_cancelled(base, task_id, at, reason)
        if status == 'queued' then
          -- Finished after the walk: finishing may evict runs whose children the walk has yet to reach.
          table.insert(unclaimed, { key = key, task_id = task_id, run = run, timed = state[5] or state[6] })
        elseif process then
          local messages = notifications[process]
          if not messages then
            messages = {}
            notifications[process] = messages
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
  table.sort(unclaimed, function(left, right) return tonumber(left.run) < tonumber(right.run) end)
  for _, task in ipairs(unclaimed) do
    finish(base, session_key, task.key, task.task_id, task.run, at, { status = 'cancelled', timed = task.timed })
  end
  -- LIMIT 0: a trim otherwise removes at most 100 nodes' worth of entries, less than a large cascade added.
  redis.call('XTRIM', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, 'LIMIT', 0)
  for process, messages in pairs(notifications) do
    redis.call('PUBLISH', channel_of(base, process), table.concat(messages))
  end
  return moved
end

-- The fields of one task to open, in the order `stv2_open` and `stv2_open_batch` take them.
local OPEN_FIELDS = 11

-- Opens one task of the session: a start or a reservation (`a` holds its OPEN_FIELDS arguments from `first`).
-- Returns {run, status, reason, next timer due or ""}, or nil and the refusal's code: DUPLICATE, UNKNOWN_PARENT or
-- PARENT_FINISHED.
local function open_task(session_key, base, a, first, deadline_reason)
  local task_id, parent_id, agent, description, metadata = a[first], a[first + 1], a[first + 2], a[first + 3],
    a[first + 4]
  local detached, reserved = a[first + 5] == '1', a[first + 6] == '1'
  local process, deadline = a[first + 7], a[first + 8]
  local claim_timeout_ms, claim_error = a[first + 9], a[first + 10]
  local key = task_key(base, task_id)
  local old = fields(key, 'run', 'fin')
  if old[1] and old[2] ~= '1' then return nil, 'DUPLICATE' end
  local inherited = nil
  local parent_run = nil
  if parent_id ~= '' then
    local parent = fields(task_key(base, parent_id), 'run', 'fin', 'status', 'reason', 'origin', 'due_ms')
    if not parent[1] then return nil, 'UNKNOWN_PARENT' end
    if parent[2] == '1' then return nil, 'PARENT_FINISHED' end
    parent_run = parent[1]
    if parent[3] == 'cancelled' and not detached then
      inherited = { reason = parent[4], origin = parent[5] }
    end
    if parent[6] and not detached then
      local bound = tonumber(parent[6])
      if deadline == '' or bound < tonumber(deadline) then deadline = parent[6] end
    end
  end
  local run = digits(stored_seq + 1)
  stored_seq = tonumber(run)
  -- A refused start changes nothing, its time of last change included.
  if old[1] then
    -- A finished run of this id is replaced: it stops counting against the bound now.
    release_run(base, task_id, old[1])
    redis.call('DEL', key)
    stored_retained = stored_retained - 1
    record_change(session_key, 'seq', run, 'retained', digits(stored_retained))
  else
    record_change(session_key, 'seq', run)
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
  local flags = { 'detached', detached, 'reserved', reserved }
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
      'cause', 'parent' }) do
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
  local reason = ''
  if inherited then
    emit(base, task_id, 'started', 'cancelled', at, 'reason', inherited.reason)
    emit(base, task_id, 'cancelled', 'cancelled', at, 'reason', inherited.reason)
    if reserved then
      finish(base, session_key, key, task_id, run, at, { status = 'cancelled', timed = false })
    end
    reason = inherited.reason
  else
    emit(base, task_id, 'started', status, at)
  end
  local next_due = ''
  -- A task that begins cancelled has no use for a deadline's timer: nothing can cancel it again.
  if deadline ~= '' and PENDING[status] then
    local due = tonumber(deadline)
    if due <= now_ms() then
      cancel_trees(base, session_key, { task_id }, deadline_reason, 'deadline', at)
      status = 'cancelled'
      reason = deadline_reason
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
  return { run, status, reason, next_due }
end

-- stv2_open(session_key; inc, task_id, parent_id, agent, description, metadata, detached, reserved, process,
-- deadline_ms, claim_timeout_ms, claim_error, deadline_reason): a start or a reservation, with an optional
-- deadline (milliseconds since the epoch; a child's is bounded by its parent's unless detached) and, for a
-- reservation, a claim timeout. Returns {run, status, reason, next timer due or ""} or an error reply whose message
-- starts with GONE, DUPLICATE, UNKNOWN_PARENT, PARENT_FINISHED or CLOSED.
local function st_open(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  if stored_closed then return redis.error_reply('CLOSED') end
  local opened, refusal = open_task(session_key, base_of(session_key), args, 2, args[13])
  if not opened then return redis.error_reply(refusal) end
  return opened
end

-- stv2_open_batch(session_key; inc, deadline_reason, then OPEN_FIELDS arguments per task, as stv2_open's):
-- opens every task of the batch, in order, or none. A task may name as parent one earlier in the batch.
-- Returns the four replies of stv2_open per task, one after the other, or an error reply `<CODE> <index>` (the
-- 0-based index of the task refused) with stv2_open's codes, or DUPLICATE_IN_BATCH.
local function st_open_batch(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  if stored_closed then return redis.error_reply('CLOSED') end
  local base = base_of(session_key)
  local count = (#args - 2) / OPEN_FIELDS
  local current_ms = now_ms()
  -- Every refusal is found before the first task opens (the function runs alone, so nothing changes between),
  -- including a parent earlier in the batch that will have finished by the time its child opens: a reservation
  -- that begins cancelled (under a cancelled parent, or past its deadline) finishes as it opens.
  local opened_here = {}
  for index = 0, count - 1 do
    local first = 3 + index * OPEN_FIELDS
    local task_id, parent_id = args[first], args[first + 1]
    local detached, reserved, deadline = args[first + 5] == '1', args[first + 6] == '1', args[first + 8]
    local refusal = nil
    local inherits_cancel, inherited_due = false, nil
    if opened_here[task_id] then
      refusal = 'DUPLICATE_IN_BATCH'
    else
      local old = fields(task_key(base, task_id), 'run', 'fin')
      if old[1] and old[2] ~= '1' then refusal = 'DUPLICATE' end
    end
    if not refusal and parent_id ~= '' then
      local here = opened_here[parent_id]
      if here then
        if here.finishes then refusal = 'PARENT_FINISHED' end
        inherits_cancel, inherited_due = here.cancelled, here.due
      else
        local parent = fields(task_key(base, parent_id), 'run', 'fin', 'status', 'due_ms')
        if not parent[1] then
          refusal = 'UNKNOWN_PARENT'
        elseif parent[2] == '1' then
          refusal = 'PARENT_FINISHED'
        end
        inherits_cancel, inherited_due = parent[3] == 'cancelled', tonumber(parent[4])
      end
    end
    if refusal then return redis.error_reply(refusal .. ' ' .. index) end
    if detached then inherits_cancel, inherited_due = false, nil end
    local due = deadline ~= '' and tonumber(deadline) or nil
    if inherited_due and (not due or inherited_due < due) then due = inherited_due end
    local cancelled = inherits_cancel or (due ~= nil and due <= current_ms)
    opened_here[task_id] = { cancelled = cancelled, finishes = cancelled and reserved, due = due }
  end
  local replies = {}
  for index = 0, count - 1 do
    local opened, refusal = open_task(session_key, base, args, 3 + index * OPEN_FIELDS, args[2])
    -- Unreachable after the checks above; were it reached, the tasks before it would stay open.
    if not opened then return redis.error_reply('PROTOCOL ' .. refusal .. ' ' .. index) end
    for _, reply in ipairs(opened) do replies[#replies + 1] = reply end
  end
  return replies
end

-- stv2_cancel(session_key; inc, task_id, reason, cause): a cancel of one task and its pending descendants.
-- Returns 1 when the task itself moved, 0 otherwise.
local function st_cancel(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch(session_key)
  local base = base_of(session_key)
  local key = task_key(base, args[2])
  local status = redis.call('HGET', key, 'status')
  if not status or not PENDING[status] then return 0 end
  cancel_trees(base, session_key, { args[2] }, args[3], args[4], now())
  return 1
end

-- stv2_cancel_all(session_key; inc, reason, close): cancels every pending task; with close = "1", first records
-- the session as closed (keeping the first reason). Returns how many moved.
local function st_cancel_all(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  touch(session_key)
  local base = base_of(session_key)
  local reason = args[2]
  if args[3] == '1' then
    redis.call('HSETNX', session_key, 'closed', reason)
    reason = redis.call('HGET', session_key, 'closed')
  end
  -- Every unfinished task; the cancelled among them are passed over.
  local roots = redis.call('ZRANGE', base .. 'live', 0, -1)
  return cancel_trees(base, session_key, roots, reason, 'session', now())
end

-- stv2_end(session_key; inc, task_id, run, outcome, value): the runner's end (outcome completed, failed, or stopped
-- with the reason as value), a dropped handle (dropped), an end recorded by id (run ""), or an expired claim
-- (claim_expired: fails only a queued task).
-- Returns {transitioned, finished_now}: {0, 0} when the run had already finished or is not the current one. An end
-- by id through an object of an ended incarnation is refused with GONE; a runner's end of such a run is {0, 0}.
local function st_end(keys, args)
  local session_key = keys[1]
  local task_id, run, outcome, value = args[2], args[3], args[4], args[5]
  if not same_incarnation(args[1]) then
    if run == '' then return gone() end
    return { 0, 0 }
  end
  local base = base_of(session_key)
  local key = task_key(base, task_id)
  local state = fields(key, 'run', 'status', 'fin', 'due_ms', 'claim_error')
  if not state[1] or state[3] == '1' or (run ~= '' and state[1] ~= run) then
    touch(session_key)
    return { 0, 0 }
  end
  local status = state[2]
  if outcome == 'claim_expired' then
    if status ~= 'queued' then
      touch(session_key)
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
  end
  finish(base, session_key, key, task_id, state[1], now(),
    { status = status, timed = state[4] or state[5], written = written })
  return { transitioned, 1 }
end

-- stv2_claim(session_key; inc, task_id, process): a runner takes a reserved task. Returns {run, status,
-- reason}; errors GONE, UNKNOWN, CLAIMED or ENDED <status>.
local function st_claim(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  local task_id, process = args[2], args[3]
  local base = base_of(session_key)
  local key = task_key(base, task_id)
  local state = fields(key, 'run', 'status', 'reserved', 'claimed_at', 'reason')
  if not state[1] then return redis.error_reply('UNKNOWN') end
  if state[3] ~= '1' or state[4] then return redis.error_reply('CLAIMED') end
  local status = state[2]
  if status ~= 'queued' and status ~= 'cancelled' then return redis.error_reply('ENDED ' .. status) end
  if status == 'queued' then status = 'running' end
  touch(session_key)
  local at = now()
  redis.call('ZREM', base .. 'timers', timer('c', task_id, state[1]))
  redis.call('HSET', key, 'status', status, 'claimed_at', at, 'worker', process)
  emit(base, task_id, 'claimed', status, at)
  return { state[1], status, state[5] or '' }
end

-- stv2_progress(session_key; inc, task_id, run, message): records a progress message on an unfinished run.
local function st_progress(keys, args)
  if not same_incarnation(args[1]) then return 0 end
  local base = base_of(keys[1])
  local key = task_key(base, args[2])
  local state = fields(key, 'run', 'fin', 'status', 'progress_count')
  if state[1] ~= args[3] or state[2] == '1' then return 0 end
  touch(keys[1])
  redis.call('HSET', key, 'progress', args[4], 'progress_count', digits((tonumber(state[4]) or 0) + 1))
  emit(base, args[2], 'progress', state[3], now(), 'message', args[4])
  return 1
end

-- stv2_escalate(session_key; inc, task_id, run): records that the run's runner was stopped by force after its
-- grace (snapshots show it as escalated). Returns 1, or 0 when that run is no longer the task's current one.
local function st_escalate(keys, args)
  if not same_incarnation(args[1]) then return 0 end
  local key = task_key(base_of(keys[1]), args[2])
  if redis.call('HGET', key, 'run') ~= args[3] then return 0 end
  redis.call('HSET', key, 'escalated', '1')
  return 1
end

local function snapshot(base, task_id)
  return redis.call('HGETALL', task_key(base, task_id))
end

-- stv2_get(session_key; inc, task_id): the task's fields as a flat list, empty when not retained.
local function st_get(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  return snapshot(base_of(keys[1]), args[2])
end

-- The value of `name` in a flat field list (an HGETALL reply).
local function field_of(flat, name)
  for index = 1, #flat, 2 do
    if flat[index] == name then return flat[index + 1] end
  end
  return nil
end

-- Calls `visit(task_id, run)` for every retained run: the unfinished ones of the live index, then the finished
-- ones of the finished list (whose entries of replaced runs are stale: the task's hash holds another run).
local function each_retained(base, visit)
  local live = redis.call('ZRANGE', base .. 'live', 0, -1, 'WITHSCORES')
  -- A score comes back as the server formats a double; the run as the task's hash holds it is its digits.
  for index = 1, #live, 2 do visit(live[index], digits(tonumber(live[index + 1]))) end
  for _, entry in ipairs(redis.call('LRANGE', base .. 'finished', 0, -1)) do
    local task_id, run = string.match(entry, '^(.*)\t(%d+)$')
    visit(task_id, run)
  end
end

-- stv2_list(session_key; inc, which): the fields of every pending ("pending") or retained ("all") task, in start
-- order.
local function st_list(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local found = {}
  if args[2] == 'pending' then
    for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
      local task = snapshot(base, task_id)
      if PENDING[field_of(task, 'status')] then table.insert(found, task) end
    end
    return found
  end
  each_retained(base, function(task_id, run)
    local task = snapshot(base, task_id)
    if field_of(task, 'run') == run then table.insert(found, { run = tonumber(run), task = task }) end
  end)
  table.sort(found, function(left, right) return left.run < right.run end)
  local listed = {}
  for index, item in ipairs(found) do listed[index] = item.task end
  return listed
end

-- stv2_status(session_key; task_id, run, ...): for each run a worker runs, {status, reason, origin, cause}, or
-- {"gone"} when that run is no longer the task's current one (run numbers are never reused, whatever happened to
-- the session).
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
  each_retained(base, function(task_id, run)
    -- A stale entry's task belongs to a later run, deleted with that run's own entry.
    local key = task_key(base, task_id)
    if redis.call('HGET', key, 'run') == run then
      redis.call('DEL', children_key(base, run), key)
    end
  end)
  redis.call('DEL', session_key, base .. 'live', base .. 'finished', base .. 'events', base .. 'timers')
end

-- {incarnation, closed ("1" or "0"), unfinished task count, max_finished} of the session under `session_key`, or
-- {} for none.
local function session_state(session_key)
  local state = redis.call('HMGET', session_key, 'inc', 'closed', 'max')
  if not state[1] then return {} end
  local unfinished = redis.call('ZCARD', base_of(session_key) .. 'live')
  return { state[1], state[2] and '1' or '0', tostring(unfinished), state[3] }
end

-- stv2_session(session_key): {incarnation, closed ("1" or "0"), unfinished task count, max_finished}, or {} for no
-- session.
local function st_session(keys)
  return session_state(keys[1])
end

-- stv2_touch(session_key; max_finished): makes the session exist, with its bound, unless it does. A closed
-- session whose tasks are all finished has left: its keys go, and its id names a new incarnation, whose run
-- numbers start past the old one's. Returns what `stv2_session` does.
local function st_touch(keys, args)
  local session_key = keys[1]
  local state = session_state(session_key)
  local after = 0
  if state[2] == '1' and state[3] == '0' then
    after = tonumber(redis.call('HGET', session_key, 'seq'))
    remove_session(base_of(session_key), session_key)
    state = {}
  end
  if not state[1] then
    local inc = digits(math.max(now_ms() * 1000, after + 1))
    redis.call('HSET', session_key, 'inc', inc, 'seq', inc, 'max', args[1], 'retained', 0)
  end
  touch(session_key)
  return session_state(session_key)
end

-- The task's current run if it is unfinished and the worker process runs it, with when the process began it (its
-- claim, or its start), in milliseconds; nil otherwise.
local function unfinished_run_of(key, process)
  local state = fields(key, 'run', 'fin', 'worker', 'started_at', 'claimed_at')
  local run, finished, owner, started_at, claimed_at = state[1], state[2], state[3], state[4], state[5]
  if not run or finished == '1' or owner ~= process then return nil end
  return run, tonumber(claimed_at or started_at or '0') * 1000
end

-- Ends a run whose runner is gone: a running one fails with `error`, a cancelled one finishes.
local function end_lost_run(base, session_key, key, task_id, run, error, at)
  if redis.call('HGET', key, 'status') == 'running' then
    redis.call('HSET', key, 'status', 'failed', 'error', error)
  end
  finish(base, session_key, key, task_id, run, at)
end

-- stv2_reap(session_key; process, error, expired_at_ms): the worker process's lease expired at `expired_at_ms`.
-- Its running tasks begun before then fail with `error`, its cancelled ones become finished. Returns how many it
-- finished.
local function st_reap(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  local process, error, expired_at = args[1], args[2], tonumber(args[3])
  local reaped = 0
  local at = now()
  for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
    local key = task_key(base, task_id)
    local run, since = unfinished_run_of(key, process)
    -- A run begun after the lease expired is the work of a worker that came back: not the lost one's.
    if run and since < expired_at then
      end_lost_run(base, session_key, key, task_id, run, error, at)
      reaped = reaped + 1
    end
  end
  return reaped
end

-- stv2_orphans(session_key; process, grace_ms, error, held...): the runs recorded as the worker process's that it
-- does not hold (its start or claim took effect but the reply never reached it), once older than `grace_ms`: a
-- running one fails with `error`, a cancelled one finishes. Returns {how many it ended, how many unheld runs are
-- younger than the grace and left for a later look}.
local function st_orphans(keys, args)
  local session_key = keys[1]
  local base = base_of(session_key)
  local process, grace, error = args[1], tonumber(args[2]), args[3]
  local held = {}
  for index = 4, #args do held[args[index]] = true end
  local ended, young = 0, 0
  local current_ms = now_ms()
  for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
    if not held[task_id] then
      local key = task_key(base, task_id)
      local run, since = unfinished_run_of(key, process)
      if run then
        if current_ms - since > grace then
          end_lost_run(base, session_key, key, task_id, run, error, now())
          ended = ended + 1
        else
          young = young + 1
        end
      end
    end
  end
  return { ended, young }
end

-- stv2_lease(workers_key; process, lease_ms): renews the worker process's lease to `lease_ms` from the server's
-- clock. Returns {the server's time, 1 if the lease was there (0: it was reaped and forgotten, or is new)}.
local function st_lease(keys, args)
  local current = now_ms()
  local existed = redis.call('ZSCORE', keys[1], args[1]) and 1 or 0
  redis.call('ZADD', keys[1], current + tonumber(args[2]), args[1])
  return { current, existed }
end

-- stv2_forget(workers_key, announced_key; process): drops a reaped worker process's lease and what it announced,
-- unless it renewed meanwhile (it came back). Both keys are registry-wide, in one slot.
local function st_forget(keys, args)
  local expiry = tonumber(redis.call('ZSCORE', keys[1], args[1]))
  if expiry and expiry <= now_ms() then
    redis.call('DEL', keys[2])
    return redis.call('ZREM', keys[1], args[1])
  end
  return 0
end

-- stv2_announce(workers_key, announced_key; process, lease_ms, session...): records that the worker process runs
-- tasks in the sessions, stamped with the server's time (so `stv2_drop_stale` never drops an announcement newer
-- than what it was asked about). An announcement never outlives its lease: a process whose lease a reaper forgot
-- gets one again, so that the reaper finds what it announces should it die. Returns 1 if the lease was there.
local function st_announce(keys, args)
  local current = now_ms()
  local lease_held = redis.call('ZSCORE', keys[1], args[1]) and 1 or 0
  if lease_held == 0 then redis.call('ZADD', keys[1], current + tonumber(args[2]), args[1]) end
  for index = 3, #args do redis.call('ZADD', keys[2], current, args[index]) end
  return lease_held
end

-- stv2_drop_stale(sorted_set_key; age_ms, member...): removes the members whose score (a time, in milliseconds) is
-- at least `age_ms` old by the server's clock; one stamped again since the caller's look stays. It withdraws a
-- worker process's announcements (one announced again meanwhile stays) and takes swept sessions out of the index
-- (one listed again since the sweep's look, its id naming a new session, stays).
local function st_drop_stale(keys, args)
  local before = now_ms() - tonumber(args[1])
  local dropped = 0
  for index = 2, #args do
    local stamp = tonumber(redis.call('ZSCORE', keys[1], args[index]))
    if stamp and stamp <= before then dropped = dropped + redis.call('ZREM', keys[1], args[index]) end
  end
  return dropped
end

-- stv2_expired(workers_key): the worker processes whose lease has passed, by the server's clock, each with its
-- expiry.
local function st_expired(keys)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms(), 'WITHSCORES')
end

-- stv2_fire(session_key; deadline_reason): fires the session's due timers: a deadline cancels its task's tree
-- (cause deadline), a claim timeout fails a task still queued. Returns when the next timer falls due, or -1.
local function st_fire(keys, args)
  local session_key = keys[1]
  if redis.call('EXISTS', session_key) == 0 then return -1 end
  local base = base_of(session_key)
  local at = now()
  local due = {}
  local listed = redis.call('ZRANGEBYSCORE', base .. 'timers', '-inf', now_ms(), 'WITHSCORES')
  if #listed > 0 then touch(session_key) end
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
        finish(base, session_key, key, task_id, run, at,
          { status = 'failed', timed = true, written = { 'status', 'failed', 'error', state[3] or 'claim timeout' } })
      end
    end
  end
  local next_timer = redis.call('ZRANGE', base .. 'timers', 0, 0, 'WITHSCORES')
  if next_timer[2] then return tonumber(next_timer[2]) end
  return -1
end

-- stv2_schedule(timers_key, changes_key; session_id, due_ms): records that the session has a timer due at
-- `due_ms`, unless one is due earlier, and counts the change (so a retime that read the session before it leaves
-- the entry alone).
local function st_schedule(keys, args)
  redis.call('ZADD', keys[1], 'LT', args[2], args[1])
  return redis.call('HINCRBY', keys[2], args[1], 1)
end

-- stv2_due(timers_key, changes_key): the sessions with a timer due, by the server's clock, each with its count of
-- changes: {session, changes, session, changes, ...}.
local function st_due(keys)
  local due = redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms())
  local listed = {}
  for _, session_id in ipairs(due) do
    table.insert(listed, session_id)
    table.insert(listed, redis.call('HGET', keys[2], session_id) or '0')
  end
  return listed
end

-- stv2_retime(timers_key, changes_key; session_id, next, changes): records when the session's next timer falls due
-- (-1: none), as `stv2_fire` found it. A timer scheduled since that look (its count of changes moved on) may be
-- missing from `next`: the entry is then left due, and the next look fires and retimes again.
local function st_retime(keys, args)
  local session_id, next_due = args[1], tonumber(args[2])
  if (redis.call('HGET', keys[2], session_id) or '0') ~= args[3] then return 0 end
  if next_due < 0 then
    redis.call('ZREM', keys[1], session_id)
    redis.call('HDEL', keys[2], session_id)
  else
    redis.call('ZADD', keys[1], next_due, session_id)
  end
  return 1
end

-- stv2_index(sessions_key; session_id): lists the session in the index, as changed now by the server's clock (an
-- entry only ever moves later: the index is a hint of when to look, and each session's hash has the truth).
local function st_index(keys, args)
  return redis.call('ZADD', keys[1], 'GT', now_ms(), args[1])
end

-- stv2_idle(sessions_key; ttl_ms, count): up to `count` sessions of the index whose recorded last change is older
-- than `ttl_ms`, by the server's clock: the candidates for `stv2_sweep`.
local function st_idle(keys, args)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms() - tonumber(args[1]), 'LIMIT', 0, tonumber(args[2]))
end

-- stv2_sweep(session_key; ttl_ms): removes the session, every key of it, if nothing changed in it for `ttl_ms`
-- and none of its tasks is unfinished. Returns -1 when removed (or when there was no such session), otherwise
-- when to look again: the time of its last change, or now for a session kept by an unfinished task (so that it
-- goes to the back of the index instead of coming first in every round).
local function st_sweep(keys, args)
  local session_key = keys[1]
  if redis.call('EXISTS', session_key) == 0 then return -1 end
  local base = base_of(session_key)
  local touched = tonumber(redis.call('HGET', session_key, 'touched') or '0')
  local current = now_ms()
  if redis.call('ZCARD', base .. 'live') > 0 then return current end
  if current - touched < tonumber(args[1]) then return touched end
  remove_session(base, session_key)
  return -1
end

-- stv2_unlock(lock_key; holder): releases a lock only if `holder` still holds it.
local function st_unlock(keys, args)
  if redis.call('GET', keys[1]) == args[1] then return redis.call('DEL', keys[1]) end
  return 0
end

local function register(name, callback, read_only)
  local flags = read_only and { 'no-writes' } or {}
  local function call(keys, args)
    clock = nil
    return callback(keys, args)
  end
  redis.register_function{ function_name = 'stv2_' .. name, callback = call, flags = flags }
end

-- Registry-wide functions.
register('schedule', st_schedule)
register('due', st_due, true)
register('retime', st_retime)
register('index', st_index)
register('unlock', st_unlock)
register('idle', st_idle, true)
register('lease', st_lease)
register('forget', st_forget)
register('announce', st_announce)
register('drop_stale', st_drop_stale)
register('expired', st_expired, true)
-- Functions of one session.
register('fire', session_function(st_fire))
register('reap', session_function(st_reap))
register('orphans', session_function(st_orphans))
register('sweep', session_function(st_sweep))
register('open', session_function(st_open))
register('open_batch', session_function(st_open_batch))
register('touch', session_function(st_touch))
register('cancel', session_function(st_cancel))
register('cancel_all', session_function(st_cancel_all))
register('end', session_function(st_end))
register('claim', session_function(st_claim))
register('progress', session_function(st_progress))
register('escalate', session_function(st_escalate))
register('get', session_function(st_get), true)
register('list', session_function(st_list), true)
register('status', st_status, true)
register('session', st_session, true)
