-- Appends one lifecycle event to the session's stream; `extra` is the reason or the progress message. The call
-- trims the stream once, as it ends (`session_function`).
-- The stream's key, made once per session a call works on (each concatenation is a new string to the server).
local events_base, events_key = nil, nil
local function events_of(base)
  if base ~= events_base then events_base, events_key = base, base .. KEY.events end
  return events_key
end

local function emit(base, task_id, kind, status, at, extra_name, extra)
  -- The entry id `<ms>-<number>` numbers the session's events, so a reader knows how many it missed from the ids
  -- alone (`next_event_id`).
  if extra_name then
    redis.call('XADD', events_of(base), next_event_id(), 'task', task_id, 'kind', kind, 'status', status, 'at', at,
      extra_name, extra)
  else
    redis.call('XADD', events_of(base), next_event_id(), 'task', task_id, 'kind', kind, 'status', status, 'at', at)
  end
end

-- A cascade's event for each task it cancels. It names the run, as an end's event does, for the readers that
-- watch one run (tokens by id).
local function emit_cancelled(base, task_id, run, at, reason)
  redis.call('XADD', events_of(base), next_event_id(), 'task', task_id, 'kind', 'cancelled', 'status', 'cancelled',
    'at', at, 'reason', reason, 'run', run)
end
