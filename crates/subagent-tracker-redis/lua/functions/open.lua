-- stv2_open(session_key; inc, deadline_reason, then each task as `opening_at` reads it): starts or reserves each
-- task, in order and each on its own, with an optional deadline (milliseconds since the
-- epoch; a child's is bounded by its parent's unless detached) and, for a reservation, a claim timeout. Many tasks
-- in one call are the starts of unrelated callers coalesced (`src/coalesce.rs`): each refusal is its task's alone.
-- Returns one reply per task: {run, status, reason, next timer due or "", origin, cause, handling} (see
-- `open_task`), without the empty values at its end (a start on the common path replies {run, status}), or
-- {"", refusal}, the refusal DUPLICATE, UNKNOWN_PARENT or PARENT_FINISHED; or an error reply GONE or CLOSED, which
-- refuses them all.
-- Includes: session, open, register.
local function st_open(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  if stored_closed then return redis.error_reply('CLOSED') end
  local base = base_of(keys[1])
  local replies = {}
  local first = 3
  while first <= #args do
    local opened, refusal = open_task(base, args, first, args[2])
    first = args[first] == 's' and first + 3 or first + 13
    if opened then
      -- Each value costs the reply's conversion: the empty ones at the end stay out.
      local last = 7
      while last > 2 and opened[last] == '' do
        opened[last] = nil
        last = last - 1
      end
      replies[#replies + 1] = opened
    else
      replies[#replies + 1] = { '', refusal }
    end
  end
  return replies
end

register('open', session_function(st_open))
