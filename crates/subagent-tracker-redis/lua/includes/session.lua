-- The incarnation of the session the running function works on (false for none), read once per call by
-- `session_function`.
local stored_inc = false
-- The session's last event, read once per call and written back once by `session_function` if the call emitted
-- any: its id's time part and its number. Events are numbered one after another, from the incarnation's number
-- on, so that a reader knows how many it missed; their ids are `<ms>-<number>`, `ms` the server's clock and never
-- behind the last, so that after Redis lost writes (a restart from older state, a failover) the numbers go back
-- and the ids do not: a reader reads every new event, and sees by its number that events it had read were lost.
local last_event_ms, last_event_number = 0, 0
-- The last event's id as the session's hash holds it (false for none), read with the incarnation and parsed only
-- by a call that emits.
local stored_ev = false
-- The session's first close reason (false while open) and its bound on finished runs, read with the incarnation:
-- neither changes during a call that did not write it.
local stored_closed = false
local stored_max = nil
-- How long, in microseconds, a finished run is kept after it ended (nil: until the bound evicts it).
local stored_max_age = nil
-- The session's last run number and its count of retained runs, read with the incarnation and kept current by the
-- function's own writes (`record_change`).
local stored_seq = nil
local stored_retained = 0
-- The fields of the session's hash that the running function changed (`record_change`; nil for none): written in
-- one HSET when it ends, with the last event's id, so that a start or an end changes the session's hash once.
local changed = nil

-- Wraps a function of one session: it knows the session's incarnation, and its events get ids of it.
local function session_function(callback)
  return function(keys, args)
    local session = redis.call('HMGET', keys[1], 'inc', 'closed', 'max', 'seq', 'retained', 'max_age', 'ev')
    stored_inc, stored_closed, stored_max = session[1], session[2], tonumber(session[3])
    stored_seq, stored_retained = tonumber(session[4]), tonumber(session[5]) or 0
    stored_max_age = tonumber(session[6])
    stored_ev, last_event_ms = session[7], nil
    -- A call that failed part way leaves nothing for the next one to write.
    changed = nil
    local reply = callback(keys, args)
    -- A session without its hash (evicted, removed) gets no stray one: a function that found none changed nothing.
    if changed then
      local written = {}
      for field, value in pairs(changed) do
        written[#written + 1] = field
        written[#written + 1] = value
      end
      redis.call('HSET', keys[1], unpack(written))
    end
    return reply
  end
end

-- Records a change of the session now (a session is idle from its last change), with the session's fields the
-- change sets (`...`: field, value, ...), for `session_function` to write to the session's hash when the
-- function ends.
local function record_change(...)
  changed = changed or {}
  changed.touched = now_ms_digits()
  for index = 1, select('#', ...), 2 do
    local field, value = select(index, ...)
    changed[field] = value
  end
end

-- The id of the session's next event (see `last_event_ms`), recorded as the session's last.
local function next_event_id()
  if not last_event_ms then
    -- An incarnation numbers its events on from its own number, which is past every earlier incarnation's
    -- events: a reader of an ended incarnation sees the numbers jump.
    last_event_ms, last_event_number = 0, tonumber(stored_inc) or 0
    if stored_ev then
      local ms, number = string.match(stored_ev, '^(%d+)-(%d+)$')
      last_event_ms, last_event_number = tonumber(ms), tonumber(number)
    end
  end
  last_event_ms = math.max(last_event_ms, now_ms())
  last_event_number = last_event_number + 1
  local id = string.format('%d-%d', last_event_ms, last_event_number)
  changed = changed or {}
  changed.ev = id
  return id
end

-- True when the caller's session object (incarnation `inc`, '' for any) is the session the function works on.
local function same_incarnation(inc)
  return stored_inc ~= false and (inc == '' or stored_inc == inc)
end

local function gone() return redis.error_reply('GONE') end

-- Takes the session's next run number: past its last one, and past the server's clock in microseconds. The clock
-- goes on across a restart from older state or a failover to a lagging replica, where the stored last number
-- goes back, so a run lost that way never has its number handed out again (contract section 20).
local function next_run()
  stored_seq = math.max(stored_seq + 1, now_us())
  return digits(stored_seq)
end

local function touch()
  record_change()
end

local function base_of(session_key)
  return string.sub(session_key, 1, #session_key - #'session')
end
