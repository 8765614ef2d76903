-- stv2_open(session_key; inc, task_id, parent_id, agent, description, metadata, detached, reserved, process,
-- deadline_ms, claim_timeout_ms, claim_error, structured, deadline_reason): a start or a reservation, with an optional
-- deadline (milliseconds since the epoch; a child's is bounded by its parent's unless detached) and, for a
-- reservation, a claim timeout. Returns {run, status, reason, next timer due or "", origin, cause, handling} (see
-- `open_task`) or an error reply whose message starts with GONE, DUPLICATE, UNKNOWN_PARENT, PARENT_FINISHED or
-- CLOSED.
local function st_open(keys, args)
  local session_key = keys[1]
  if not same_incarnation(args[1]) then return gone() end
  if stored_closed then return redis.error_reply('CLOSED') end
  local opened, refusal = open_task(session_key, base_of(session_key), args, 2, args[14])
  if not opened then return redis.error_reply(refusal) end
  return opened
end

register('open', session_function(st_open))
