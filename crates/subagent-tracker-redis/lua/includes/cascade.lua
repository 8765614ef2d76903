-- A notification to a worker: each field as "<byte length>:<bytes>", so that no character of an id or a reason
-- can be mistaken for a separator.
local function fields_message(...)
  local parts = {}
  for index, field in ipairs({ ... }) do
    parts[index] = #field .. ':' .. field
  end
  return table.concat(parts)
end

-- The session as its keys encode it (between `{s:` and `}:`), framed as a message's first field; the worker
-- decodes it.
local function session_field_of(base)
  return fields_message(string.sub(base, string.find(base, '{', 1, true) + 3, -3))
end

-- One notification to a worker about run `run` of `task_id`: a cancel with its reason, origin and cause, or a
-- resume ("resume" as the cause, the value as the reason).
local function worker_message(base, task_id, run, reason, origin, cause)
  return session_field_of(base) .. fields_message(task_id, run, reason, origin, cause)
end

-- Has the running call's reply carry what it tells the worker process `process` (the caller's own; "" for none),
-- besides the push (`tell_worker`, `told_caller`).
local function tell_caller(process)
  if process ~= '' then caller_process = process end
end

-- Publishes `message` on the channel of the worker process `process`; keeps it for the reply too when that
-- process is the running call's caller.
local function tell_worker(base, process, message)
  redis.call('PUBLISH', channel_of(base, process), message)
  if process == caller_process then
    caller_messages = caller_messages or {}
    caller_messages[#caller_messages + 1] = message
  end
end

-- What the running call told its caller's worker process, as one message ("" for nothing).
local function told_caller()
  if not caller_messages then return '' end
  return table.concat(caller_messages)
end

-- Cascades proceed in steps (contract §3 and §20): a call reads at most WALK_STEP tasks, so that no call holds
-- the server long whatever the size of a tree or a session, and what is left of a walk is kept in the session's
-- keys for the next step (`stv2_walk`). The caller that started a walk takes its steps until it is done; a walk no
-- step advanced for WALK_GRACE_MS (its caller died) is taken on by a worker's timer loop (its timer "w\t<id>\t0").
-- The root is cancelled by the first step, so a child started during the walk under a task already cancelled
-- starts cancelled, and one started under a task not yet reached is in its parent's children set when the walk
-- reads it: no orphan. While any walk of a session is under way, its finished runs are not evicted (a walk may
-- still have to pass through them to their descendants).
local WALK_STEP = 32
local WALK_GRACE_MS = 2000

-- A walk: its settings (kind "tree", or "session" and "match", which go through the live index by run after
-- `cursor` up to `upto`; reason; cause; at; the origin every descendant names, if not its root; a match's
-- filter), its stack of visits (the top last: an id, the origin its cancel names, and a flag: "1" a root of the
-- walk, "0" a descendant, "r" a match already cancelled, to report only, "s" or "S" a children set to scan, the id
-- then "<run>:<cursor>", whose members are descendants or, for "S", roots), and what the running step did: how
-- many moved, the matches it moved, the notifications per worker, the queued tasks to finish.
local function new_walk(settings)
  settings.ids, settings.origins, settings.flags = {}, {}, {}
  settings.moved, settings.moved_roots, settings.notifications, settings.unclaimed = 0, {}, {}, {}
  settings.tails = {}
  return settings
end

local function push_visit(walk, id, origin, flag)
  local top = #walk.ids + 1
  walk.ids[top], walk.origins[top], walk.flags[top] = id, origin, flag
end

-- Reports a matching task that an earlier match's cascade reached in this very walk: moved by this call too.
local function report_if_moved_here(base, walk, task_id)
  local cancel = fields(task_key(base, task_id), 'cancelled_at', 'reason')
  if cancel[1] == walk.at and cancel[2] == walk.reason then walk.moved_roots[#walk.moved_roots + 1] = task_id end
end

-- Cancels the task `task_id` if it is pending, and stacks its children set.
local function visit_task(base, walk, task_id, origin, root, session_field)
  local key = task_key(base, task_id)
  local state = fields(key, 'status', 'run', 'worker', 'parent_of', 'on_end')
  local status, run, process, parent_of = state[1], state[2], state[3], state[4]
  if not status then return end
  if PENDING[status] then
    local entry_cause = walk.cause
    if walk.cause ~= 'session' and not root then entry_cause = 'parent' end
    local written = { 'status', 'cancelled', 'cancelled_at', walk.at, 'reason', walk.reason, 'origin', origin,
      'cause', entry_cause }
    if process and status ~= 'queued' then
      -- Its worker process runs its cancel handlers, and reports when they are done (`stv2_handled`).
      written[#written + 1] = 'handling'
      written[#written + 1] = run
    end
    redis.call('HSET', key, unpack(written))
    walk.moved = walk.moved + 1
    if root then walk.moved_roots[#walk.moved_roots + 1] = task_id end
    emit_cancelled(base, task_id, run, walk.at, walk.reason)
    if status == 'queued' then
      -- Finished as the step ends, in start order.
      table.insert(walk.unclaimed, { key = key, task_id = task_id, run = run, timed = has_timer(state[5]) })
    elseif process then
      local messages = walk.notifications[process]
      if not messages then
        messages = {}
        walk.notifications[process] = messages
      end
      -- Framing each message's fields anew took a third of a 10,000-task cascade: the reason, origin and cause
      -- are framed once per origin and cause instead.
      local tail_key = entry_cause .. '\t' .. origin
      local tail = walk.tails[tail_key]
      if not tail then
        tail = fields_message(walk.reason, origin, entry_cause)
        walk.tails[tail_key] = tail
      end
      messages[#messages + 1] = session_field .. #task_id .. ':' .. task_id .. #run .. ':' .. run .. tail
    end
  elseif root and walk.kind == 'match' and status == 'cancelled' then
    report_if_moved_here(base, walk, task_id)
  end
  -- Only a task that ever had attached children has a set to walk (`parent_of`); a session's cancel reaches
  -- every pending task through the live index.
  if parent_of and walk.cause ~= 'session' then
    local below = origin
    if root and not walk.origin then below = task_id end
    push_visit(walk, run .. ':0', below, 's')
  end
end

-- Takes the visit on top of the stack; returns how many tasks it read.
local function visit(base, walk, session_field)
  local top = #walk.ids
  local id, origin, flag = walk.ids[top], walk.origins[top], walk.flags[top]
  walk.ids[top], walk.origins[top], walk.flags[top] = nil, nil, nil
  if flag == 's' or flag == 'S' then
    local run, cursor = string.match(id, '^(%d+):(%d+)$')
    local scanned = redis.call('SSCAN', children_key(base, run), cursor, 'COUNT', WALK_STEP)
    if scanned[1] ~= '0' then push_visit(walk, run .. ':' .. scanned[1], origin, flag) end
    local members = scanned[2]
    for index = #members, 1, -1 do push_visit(walk, members[index], origin, flag == 'S' and '1' or '0') end
    return 1
  end
  if flag == 'r' then
    report_if_moved_here(base, walk, id)
    return 1
  end
  visit_task(base, walk, id, origin, flag == '1', session_field)
  return 1
end

-- Stacks the next live tasks of a session-wide walk, the earliest on top, reading at most `budget` of them;
-- returns how many it read (0 once the live index is done).
local function stack_live(base, walk, budget)
  local listed = redis.call('ZRANGE', base .. KEY.live, '(' .. walk.cursor, walk.upto, 'BYSCORE', 'LIMIT', 0, budget,
    'WITHSCORES')
  local found, flags = {}, {}
  for index = 1, #listed, 2 do
    local task_id = listed[index]
    walk.cursor = listed[index + 1]
    if walk.kind == 'session' then
      found[#found + 1], flags[#flags + 1] = task_id, '1'
    else
      local task = fields(task_key(base, task_id), 'status', 'agent', 'metadata')
      if task[1] and task_matches(walk.agent, walk.metadata, task[2], task[3]) then
        if PENDING[task[1]] and (walk.status == '' or walk.status == '=' .. task[1]) then
          found[#found + 1], flags[#flags + 1] = task_id, '1'
        elseif task[1] == 'cancelled' and walk.status == '' then
          found[#found + 1], flags[#flags + 1] = task_id, 'r'
        end
      end
    end
  end
  for index = #found, 1, -1 do push_visit(walk, found[index], found[index], flags[index]) end
  return #listed / 2
end

-- Takes one step of a walk: visits until WALK_STEP tasks are read or the walk is done, finishes the queued tasks
-- it cancelled, and tells the workers. Returns whether the walk is done.
local function step(base, walk)
  local session_field = session_field_of(base)
  local budget = WALK_STEP
  while budget > 0 do
    if #walk.ids > 0 then
      budget = budget - visit(base, walk, session_field)
    elseif walk.cursor and not walk.stacked then
      local read = stack_live(base, walk, budget)
      if read == 0 then walk.cursor = nil end
      budget = budget - math.max(read, 1)
    else
      break
    end
  end
  table.sort(walk.unclaimed, function(left, right) return tonumber(left.run) < tonumber(right.run) end)
  for _, task in ipairs(walk.unclaimed) do
    finish(base, task.key, task.task_id, task.run, walk.at, 'cancelled', task.timed)
  end
  walk.unclaimed = {}
  for process, messages in pairs(walk.notifications) do
    tell_worker(base, process, table.concat(messages))
  end
  walk.notifications = {}
  return #walk.ids == 0 and not walk.cursor
end

local WALK_FIELDS = { 'kind', 'reason', 'cause', 'at', 'origin', 'cursor', 'upto', 'agent', 'status', 'metadata' }

-- Keeps what is left of a walk under `walk_id` (a new walk when nil), its stack on top of what the stack of the
-- session's keys still holds, and its timer a grace away; returns its id.
local function keep_walk(base, walk, walk_id)
  if not walk_id then
    walk_id = next_run()
    redis.call('SADD', base .. KEY.walks, walk_id)
  end
  local settings = {}
  for _, field in ipairs(WALK_FIELDS) do
    if walk[field] then
      settings[#settings + 1] = field
      settings[#settings + 1] = walk[field]
    end
  end
  redis.call('HDEL', base .. KEY.walk .. walk_id, 'cursor')
  redis.call('HSET', base .. KEY.walk .. walk_id, unpack(settings))
  local stack = {}
  for index = 1, #walk.ids do
    stack[#stack + 1] = walk.flags[index]
    stack[#stack + 1] = walk.origins[index]
    stack[#stack + 1] = walk.ids[index]
  end
  for first = 1, #stack, 999 do
    redis.call('RPUSH', base .. KEY.walk_frontier .. walk_id, unpack(stack, first, math.min(first + 998, #stack)))
  end
  walk.due = digits(now_ms() + WALK_GRACE_MS)
  redis.call('ZADD', base .. KEY.timers, walk.due, timer('w', walk_id, '0'))
  return walk_id
end

-- The walk kept under `walk_id`, with the top of its stack taken from the session's keys (a step's worth: the
-- rest stays there), or nil for none.
local function kept_walk(base, walk_id)
  local settings = redis.call('HMGET', base .. KEY.walk .. walk_id, unpack(WALK_FIELDS))
  if not settings[1] then return nil end
  local walk = new_walk({})
  for index, field in ipairs(WALK_FIELDS) do walk[field] = settings[index] or nil end
  local stack_key = base .. KEY.walk_frontier .. walk_id
  local stack = redis.call('LRANGE', stack_key, -3 * WALK_STEP, -1)
  redis.call('LTRIM', stack_key, 0, -3 * WALK_STEP - 1)
  for index = 1, #stack, 3 do push_visit(walk, stack[index + 2], stack[index + 1], stack[index]) end
  walk.stacked = redis.call('EXISTS', stack_key) == 1
  return walk
end

-- Forgets a walk that is done.
local function drop_walk(base, walk_id)
  redis.call('DEL', base .. KEY.walk .. walk_id, base .. KEY.walk_frontier .. walk_id)
  redis.call('SREM', base .. KEY.walks, walk_id)
  redis.call('ZREM', base .. KEY.timers, timer('w', walk_id, '0'))
end

-- Takes the first step of a walk, and keeps what is left (`walk.left`, its id); returns the walk (its `moved` and
-- `moved_roots`). The running call's reply says when it left a walk (`walks_left`), so that its caller takes
-- the remaining steps (`stv2_walk`).
local function start_walk(base, walk)
  if not step(base, walk) then
    walk.left = keep_walk(base, walk, nil)
    walks_left = walks_left or {}
    walks_left[#walks_left + 1] = walk.left
  end
  return walk
end

-- When the running call left a walk under way, when its timer is due, as digits ("" for none): a caller that takes
-- no steps itself (the reaper, the orphan check) has the session's timers looked at then, and a worker's timer
-- loop takes the remaining steps.
local function walks_due()
  if not walks_left then return '' end
  return digits(now_ms() + WALK_GRACE_MS)
end

-- Takes the next step of the walk kept under `walk_id`; returns the step's walk (nil for a walk that is gone)
-- and whether the walk is done.
local function continue_walk(base, walk_id)
  local walk = kept_walk(base, walk_id)
  if not walk then return nil, true end
  local done = step(base, walk) and not walk.stacked
  if done then
    drop_walk(base, walk_id)
    -- What finished while the walk was under way was kept past the bound for it.
    eviction_due = evict_beyond_bound
  else
    keep_walk(base, walk, walk_id)
  end
  return walk, done
end

-- Cancels pending roots and their pending descendants, in steps (the first taken here). Returns how many moved in
-- this call. `cause` is recorded on each root, "parent" on descendants (naming the root as origin, or `origin`
-- when given).
local function cancel_trees(base, roots, reason, cause, at, origin_of_roots)
  local walk = new_walk({ kind = 'tree', reason = reason, cause = cause, at = at, origin = origin_of_roots })
  for index = #roots, 1, -1 do push_visit(walk, roots[index], origin_of_roots or roots[index], '1') end
  return start_walk(base, walk).moved
end

-- Cancels the pending members of run `run`'s children set and their pending descendants, as `cancel_trees` would
-- with the members as roots, each naming `origin`.
local function cancel_children(base, run, reason, cause, at, origin)
  local walk = new_walk({ kind = 'tree', reason = reason, cause = cause, at = at, origin = origin })
  push_visit(walk, run .. ':0', origin, 'S')
  return start_walk(base, walk).moved
end
