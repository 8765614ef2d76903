local function fields(key, ...)
  return redis.call('HMGET', key, ...)
end

-- What a task's end does beyond the common path, as its start records it in the field `on_end` (absent for
-- neither): "t", remove a deadline's or a claim timeout's timer; "g", settle a task group's rule, which may apply
-- (`may_settle_group`); "tg", both.
local function has_timer(on_end) return on_end == 't' or on_end == 'tg' end
local function may_start_group_rule(on_end) return on_end == 'g' or on_end == 'tg' end

local function snapshot(base, task_id)
  return redis.call('HGETALL', task_key(base, task_id))
end

-- The value of `name` in a flat field list (an HGETALL reply).
local function field_of(flat, name)
  for index = 1, #flat, 2 do
    if flat[index] == name then return flat[index + 1] end
  end
  return nil
end

-- True for a finished task (a flat field list) that ended at least the session's `max_age` ago: the next end in the
-- session, or a `forget_finished`, forgets it, and queries treat it as forgotten already (contract §7).
local function is_aged(flat)
  if not stored_max_age or field_of(flat, 'fin') ~= '1' then return false end
  local ended_at = field_of(flat, 'ended_at')
  return ended_at ~= nil and micros_of(ended_at) <= now_us() - stored_max_age
end

-- At most MAX_EARLY_CANCELS cancels wait for their task's start in one session, each for the session's
-- `early_ttl` or DEFAULT_EARLY_CANCEL_TTL_US (both written from the core's constants by `library.rs`).

-- Records a cancel of `task_id` for its next start (contract §3, cancel before start), kept `ttl_us`: in the
-- hash `early` ("<expiry in microseconds>\t<reason>") and the set `early_order`, by expiry, from which expired
-- records, and the oldest beyond the bound, are dropped.
local function record_early_cancel(base, task_id, reason, ttl_us)
  local current = now_us()
  local expires = current + ttl_us
  no_early_cancels = false
  redis.call('HSET', base .. KEY.early, task_id, digits(expires) .. '\t' .. reason)
  redis.call('ZADD', base .. KEY.early_order, expires, task_id)
  local dropped = redis.call('ZRANGEBYSCORE', base .. KEY.early_order, '-inf', current)
  local excess = redis.call('ZCARD', base .. KEY.early_order) - #dropped - MAX_EARLY_CANCELS
  if excess > 0 then
    for _, id in ipairs(redis.call('ZRANGE', base .. KEY.early_order, #dropped, #dropped + excess - 1)) do
      table.insert(dropped, id)
    end
  end
  for first = 1, #dropped, 1000 do
    local chunk = { unpack(dropped, first, math.min(first + 999, #dropped)) }
    redis.call('HDEL', base .. KEY.early, unpack(chunk))
    redis.call('ZREM', base .. KEY.early_order, unpack(chunk))
  end
end

-- Takes the live cancel recorded for `task_id`'s start: its reason, once; nil for none. A call asks the server
-- whether the session has any such cancel once, however many tasks it starts.
local function take_early_cancel(base, task_id)
  if no_early_cancels == nil then no_early_cancels = redis.call('EXISTS', base .. KEY.early) == 0 end
  if no_early_cancels then return nil end
  local recorded = redis.call('HGET', base .. KEY.early, task_id)
  if not recorded then return nil end
  redis.call('HDEL', base .. KEY.early, task_id)
  redis.call('ZREM', base .. KEY.early_order, task_id)
  local expires, reason = string.match(recorded, '^(%d+)\t(.*)$')
  if tonumber(expires) <= now_us() then return nil end
  return reason
end
