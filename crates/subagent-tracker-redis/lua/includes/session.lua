local function base_of(session_key)
  return string.sub(session_key, 1, #session_key - #KEY.session)
end
-- A session's stream keeps about this many events: it is trimmed as a call ends, once every TRIM_EVERY events (a
-- trim that finds nothing to remove still costs a server call).
local EVENT_LIMIT = 10000
local TRIM_EVERY = 64
-- The incarnation of the session the running function works on (false for none), read once per call by
-- `session_function`.
local stored_inc = false
-- The session's last event, read once per call and written back once by `session_function` if the call emitted
-- any: its id's time part (a number, and its digits) and its number (a count's two parts: `count_text`). Events
-- are numbered one after another, from the incarnation's number on, so that a reader knows how many it missed;
-- their ids are `<ms>-<number>`, `ms` the server's clock and never behind the last, so that after Redis lost writes
-- (a restart from older state, a failover) the numbers go back and the ids do not: a reader reads every new event,
-- and sees by its number that events it had read were lost.
local last_event_ms, last_event_ms_digits, event_high, event_low = nil, nil, nil, nil
-- How many events the running call emitted.
local events_emitted = 0
-- The last event's id as the session's hash holds it (false for none), read with the incarnation and parsed only
-- by a call that emits.
local stored_ev = false
-- The session's first close reason (false while open) and its bound on finished runs, read with the incarnation:
-- neither changes during a call that did not write it.
local stored_closed = false
local stored_max = nil
-- How long, in microseconds, a finished run is kept after it ended (nil: until the bound evicts it).
local stored_max_age = nil
-- The session's last run number, as a number and as its digits (`next_run`), read with the incarnation; with the
-- count's two parts once the call has counted on from it.
local stored_seq, stored_seq_digits, seq_high, seq_low = nil, nil, nil, nil
-- How many runs have joined the session's finished list since its first (a listing's position in the list: see
-- `stv2_list`), read with the incarnation.
local stored_fins = 0
-- The fields of the session's hash that the running function changed (`record_change`; nil for none): written in
-- one HSET when it ends, so that a call changes the session's hash once, however many tasks it starts or ends.
local changed = nil
-- What a call does once, however many tasks it starts or ends, each forgotten between calls: whether the session
-- has no cancel recorded before a start (`take_early_cancel`; nil until a start asks), whether the runs past the
-- session's age are forgotten already (`retain`), and the eviction its finishes made due (`evict_beyond_bound` in
-- `retention.lua`, set by `retain`: this file comes before it), run once as the call ends.
local no_early_cancels = nil
local aged_forgotten = false
local eviction_due = nil
-- The cascades the call left under way (their walks' ids; nil for none), for its caller to take the remaining
-- steps (`start_walk`).
local walks_left = nil
-- The worker process of the call's caller (`tell_caller`; nil when the caller holds no runs or does not ask) and
-- the notifications the call's cascades published to it: its reply carries them too (`told_caller`), so that a
-- cancel returns with the tokens of the caller's own runs fired, as in memory, whatever the delay of the push.
local caller_process, caller_messages = nil, nil
-- The changes of the session's indexes that a call gathers and writes as it ends, one command per index however
-- many tasks it starts or ends (`write_gathered`): the live index's (task id -> the run that joined it, or false
-- for one that left it), and the runs it finished, in order, for the finished list (false where a run finished in
-- the call was replaced in it), with each one's position. No function reads an index after changing it.
local live_changes = nil
local finished_now, finished_at = nil, nil

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

-- Records that run `run` of `task_id` joined the live index (`run` false: the task left it).
local function change_live(task_id, run)
  live_changes = live_changes or {}
  live_changes[task_id] = run
end

-- Writes the index changes the call gathered; returns the finished list's length after them, or nil when the
-- call finished nothing.
local function write_gathered(base)
  if live_changes then
    local joined, left = {}, {}
    for task_id, run in pairs(live_changes) do
      if run then
        joined[#joined + 1] = run
        joined[#joined + 1] = task_id
      else
        left[#left + 1] = task_id
      end
    end
    live_changes = nil
    -- `unpack` takes a few thousand values: a call changes at most that many (a large cascade, in chunks).
    for first = 1, #joined, 1000 do
      redis.call('ZADD', base .. KEY.live, unpack(joined, first, math.min(first + 999, #joined)))
    end
    for first = 1, #left, 1000 do
      redis.call('ZREM', base .. KEY.live, unpack(left, first, math.min(first + 999, #left)))
    end
  end
  if not finished_now then return nil end
  local finished = {}
  for _, task_id in ipairs(finished_now) do
    if task_id then finished[#finished + 1] = task_id end
  end
  finished_now, finished_at = nil, nil
  local length = nil
  for first = 1, #finished, 1000 do
    length = redis.call('RPUSH', base .. KEY.finished, unpack(finished, first, math.min(first + 999, #finished)))
  end
  if #finished > 0 then
    stored_fins = stored_fins + #finished
    record_change('fins', stored_fins)
  end
  return length or redis.call('LLEN', base .. KEY.finished)
end

-- Wraps a function of one session: it knows the session's incarnation, and its events get ids of it.
local function session_function(callback)
  return function(keys, args)
    local session = redis.call('HMGET', keys[1], 'inc', 'closed', 'max', 'seq', 'max_age', 'ev', 'fins')
    stored_inc, stored_closed, stored_max = session[1], session[2], tonumber(session[3])
    stored_seq_digits, stored_max_age, stored_ev = session[4], tonumber(session[5]), session[6]
    stored_seq, seq_high, seq_low = tonumber(stored_seq_digits), nil, nil
    stored_fins = tonumber(session[7]) or 0
    last_event_ms, events_emitted = nil, 0
    -- A call that failed part way leaves nothing for the next one to write.
    changed, no_early_cancels, aged_forgotten, eviction_due, walks_left = nil, nil, false, nil, nil
    caller_process, caller_messages = nil, nil
    live_changes, finished_now, finished_at = nil, nil, nil
    local reply = callback(keys, args)
    local base = base_of(keys[1])
    local finished_length = write_gathered(base)
    if eviction_due then
      local evict = eviction_due
      eviction_due = nil
      evict(base, finished_length)
    end
    -- A session without its hash (evicted, removed) gets no stray one: a function that found none changed nothing.
    if changed then
      local written = {}
      for field, value in pairs(changed) do
        written[#written + 1] = field
        written[#written + 1] = value
      end
      redis.call('HSET', keys[1], unpack(written))
    end
    -- The call's events crossed a multiple of TRIM_EVERY. LIMIT 0: a trim otherwise removes at most 100 nodes' worth
    -- of entries, less than a large call adds.
    if events_emitted > 0 and event_low % TRIM_EVERY < events_emitted then
      redis.call('XTRIM', base .. KEY.events, 'MAXLEN', '~', EVENT_LIMIT, 'LIMIT', 0)
    end
    return reply
  end
end

-- The id of the session's next event (see `last_event_ms`), recorded as the session's last.
local function next_event_id()
  if not last_event_ms then
    -- An incarnation numbers its events on from its own number, which is past every earlier incarnation's
    -- events: a reader of an ended incarnation sees the numbers jump.
    local ms_digits, number = '0', stored_inc or '0'
    if stored_ev then ms_digits, number = string.match(stored_ev, '^(%d+)-(%d+)$') end
    last_event_ms, last_event_ms_digits = tonumber(ms_digits), ms_digits
    event_high, event_low = split_count(number)
  end
  if now_ms() > last_event_ms then last_event_ms, last_event_ms_digits = now_ms(), now_ms_digits() end
  event_high, event_low = count_on(event_high, event_low)
  events_emitted = events_emitted + 1
  local id
  if event_high == '' then
    id = last_event_ms_digits .. '-' .. count_text(event_high, event_low)
  else
    -- `count_text` in the same concatenation: one new string rather than two.
    id = last_event_ms_digits .. '-' .. event_high .. THREE_DIGITS[math.floor(event_low / 1000)] ..
      THREE_DIGITS[event_low % 1000]
  end
  changed = changed or {}
  changed.ev = id
  return id
end

-- True when the caller's session object (incarnation `inc`, '' for any) is the session the function works on.
local function same_incarnation(inc)
  return stored_inc ~= false and (inc == '' or stored_inc == inc)
end

local function gone() return redis.error_reply('GONE') end

-- Takes the session's next run number, as its digits: past its last one, and past the server's clock in
-- microseconds. The clock goes on across a restart from older state or a failover to a lagging replica, where
-- the stored last number goes back, so a run lost that way never has its number handed out again (contract
-- section 20).
local function next_run()
  if stored_seq < now_us() then
    stored_seq = now_us()
    seq_high, seq_low = now_us_count()
  else
    stored_seq = stored_seq + 1
    if not seq_high then seq_high, seq_low = split_count(stored_seq_digits) end
    seq_high, seq_low = count_on(seq_high, seq_low)
  end
  stored_seq_digits = count_text(seq_high, seq_low)
  record_change('seq', stored_seq_digits)
  return stored_seq_digits
end

local function touch()
  record_change()
end
