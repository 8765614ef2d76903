-- The incarnation of the session the running function works on (false for none), read once per call by
-- `session_function`, and the id of its next event.
local stored_inc = false
local event_id = nil
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
    local session = redis.call('HMGET', keys[1], 'inc', 'closed', 'max', 'seq', 'retained', 'max_age')
    stored_inc, stored_closed, stored_max = session[1], session[2], tonumber(session[3])
    stored_seq, stored_retained = tonumber(session[4]), tonumber(session[5]) or 0
    stored_max_age = tonumber(session[6])
    event_id = stored_inc and (stored_inc .. '-*') or nil
    return callback(keys, args)
  end
end

-- True when the caller's session object (incarnation `inc`, '' for any) is the session the function works on.
local function same_incarnation(inc)
  return stored_inc ~= false and (inc == '' or stored_inc == inc)
end

local function gone() return redis.error_reply('GONE') end

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
