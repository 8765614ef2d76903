local EVENT_LIMIT = 10000

-- Appends one lifecycle event to the session's stream; `extra` is the reason or the progress message.
local function emit(base, task_id, kind, status, at, extra_name, extra)
  -- The entry id `<ms>-<number>` numbers the session's events, so a reader knows how many it missed from the ids
  -- alone (`next_event_id`).
  if extra_name then
    redis.call('XADD', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, next_event_id(), 'task', task_id, 'kind',
      kind, 'status', status, 'at', at, extra_name, extra)
  else
    redis.call('XADD', base .. 'events', 'MAXLEN', '~', EVENT_LIMIT, next_event_id(), 'task', task_id, 'kind',
      kind, 'status', status, 'at', at)
  end
end

-- A cascade's event for each task it cancels: untrimmed, since the cascade trims the stream once at its end. It
-- names the run, as an end's event does, for the readers that watch one run (tokens by id).
local function emit_cancelled(base, task_id, run, at, reason)
  redis.call('XADD', base .. 'events', next_event_id(), 'task', task_id, 'kind', 'cancelled', 'status', 'cancelled',
    'at', at, 'reason', reason, 'run', run)
end
