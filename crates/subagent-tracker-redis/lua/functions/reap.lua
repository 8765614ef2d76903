-- stv2_reap(session_key; process, error, expired_at_ms[, cursor]): the worker process's lease expired at
-- `expired_at_ms`. Its running tasks begun before then fail with `error`, its cancelled ones become finished. A
-- call reads at most REAP_STEP tasks of the live index, in start order, after `cursor` (the last run read; none:
-- from the first), and ends at most REAP_ENDS of them. Returns {how many it finished, the cursor of the next
-- call or "" once the index is done, when a cascade its ends set off (a task group's rule) and left under way is
-- due or ""}.
-- Includes: clock, session, keys, cascade, liveness, register.
local REAP_STEP = 200
local REAP_ENDS = 32

local function st_reap(keys, args)
  local session_key = keys[1]
  -- A session whose hash is gone (evicted) is lost, not for the reaper: its leftovers are the sweep's.
  if not stored_inc then return { 0, '', '' } end
  local base = base_of(session_key)
  local process, error, expired_at = args[1], args[2], tonumber(args[3])
  local reaped = 0
  local at = now()
  local listed = redis.call('ZRANGE', base .. KEY.live, '(' .. (args[4] or '0'), '+inf', 'BYSCORE', 'LIMIT', 0,
    REAP_STEP, 'WITHSCORES')
  for index = 1, #listed, 2 do
    local task_id = listed[index]
    local key = task_key(base, task_id)
    local run, since = unfinished_run_of(key, process)
    -- A run begun after the lease expired is the work of a worker that came back: not the lost one's.
    if run and since < expired_at then
      end_lost_run(base, key, task_id, run, error, at)
      reaped = reaped + 1
      if reaped == REAP_ENDS and index + 1 < #listed then return { reaped, listed[index + 1], walks_due() } end
    end
  end
  if #listed < 2 * REAP_STEP then return { reaped, '', walks_due() } end
  return { reaped, listed[#listed], walks_due() }
end

register('reap', session_function(st_reap))
