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

-- Cancels pending roots and their pending descendants. Returns how many moved. `cause` is recorded on each
-- root, "parent" on descendants (naming the root as origin, or `origin` when given); "session" makes every task its
-- own origin. With `moved_ids` (a table), each moved task's id is set in it.
local function cancel_trees(base, roots, reason, cause, at, moved_ids, origin_of_roots)
  local moved = 0
  -- One message per worker, however many of its runs the cancel reaches.
  local notifications = {}
  local unclaimed = {}
  local session_field = session_field_of(base)
  for _, root in ipairs(roots) do
    local tails = {}
    local stack = { root }
    while #stack > 0 do
      local task_id = table.remove(stack)
      local key = task_key(base, task_id)
      local state = fields(key, 'status', 'run', 'worker', 'parent_of', 'on_end')
      local status, run, process, parent_of = state[1], state[2], state[3], state[4]
      if status and PENDING[status] then
        local entry_cause, origin = cause, origin_of_roots or root
        if cause == 'session' then origin = task_id
        elseif task_id ~= root then entry_cause = 'parent' end
        local written = { 'status', 'cancelled', 'cancelled_at', at, 'reason', reason, 'origin', origin,
          'cause', entry_cause }
        if process and status ~= 'queued' then
          -- Its worker process runs its cancel handlers, and reports when they are done (`stv2_handled`).
          written[#written + 1] = 'handling'
          written[#written + 1] = run
        end
        redis.call('HSET', key, unpack(written))
        moved = moved + 1
        if moved_ids then moved_ids[task_id] = true end
        emit_cancelled(base, task_id, run, at, reason)
        if status == 'queued' then
          -- Finished after the walk: finishing may evict runs whose children the walk has yet to reach.
          table.insert(unclaimed, { key = key, task_id = task_id, run = run, timed = has_timer(state[5]) })
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
    finish(base, task.key, task.task_id, task.run, at, 'cancelled', task.timed)
  end
  for process, messages in pairs(notifications) do
    redis.call('PUBLISH', channel_of(base, process), table.concat(messages))
  end
  return moved
end
