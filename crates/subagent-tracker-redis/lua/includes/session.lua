-- The incarnation of the session the running function works on (false for none), read once per call by
-- `session_function`.
local stored_inc = false
-- The session's last event, read once per call and written back once by `session_function` if the call emitted
-- any: its id's time part and its number. Events are numbered one after another, from the incarnation's number
-- on, so that a reader knows how many it missed; their ids are `<ms>-<number>`, `ms` the server's clock and never
-- behind the last, so that after Redis lost writes (a restart from older state, a failover) the numbers go back
-- and the ids do not: a reader reads every new event, and sees by its number that events it had read were lost.
local last_event_ms, last_event_number = 0, 0
-- The session's first close reason (false while open) and its bound on finished runs, read with the incarnation:
-- neither changes during a call that did not write it.
local stored_closed = false
local stored_max = nil
-- How long, in microseconds, a finished run is kept after it ended (nil: until the bound evicts it).
local stored_max_age = nil
-- The session's last run number and its count of retained runs, read with the incarnation and kept current by the
-- function's own writes (`record_change`), so that a start or an end changes the session's hash in one call.
local stored_seq = nil
local stored_retained = 0

-- Wraps a function of one session: it knows the session's incarnation, and its events get ids of it.
local function session_function(callback)
  return function(keys, args)
    local session = redis.call('HMGET', keys[1], 'inc', 'closed', 'max', 'seq', 'retained', 'max_age', 'ev')
    stored_inc, stored_closed, stored_max = session[1], session[2], tonumber(session[3])
    stored_seq, stored_retained = tonumber(session[4]), tonumber(session[5]) or 0
    stored_max_age = tonumber(session[6])
    -- An incarnation numbers its events on from its own number, which is past every earlier incarnation's
    -- events: a reader of an ended incarnation sees the numbers jump.
    last_event_ms, last_event_number = 0, tonumber(stored_inc) or 0
    if session[7] then
      local ms, number = string.match(session[7], '^(%d+)-(%d+)$')
      last_event_ms, last_event_number = tonumber(ms), tonumber(number)
    end
    local numbered = last_event_number
    local reply = callback(keys, args)
    -- A session without its hash (evicted, removed) gets no stray one: a function that found none wrote nothing.
    if stored_inc and last_event_number ~= numbered then
      redis.call('HSET', keys[1], 'ev', digits(last_event_ms) .. '-' .. digits(last_event_number))
    end
    return reply
  end
end

-- The id of the session's next event (see `last_event_ms`).
local function next_event_id()
  last_event_ms = math.max(last_event_ms, now_ms())
  last_event_number = last_event_number + 1
  return digits(last_event_ms) .. '-' .. digits(last_event_number)
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
