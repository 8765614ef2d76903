-- stv2_orphans(session_key; process, grace_ms, error, held...): the runs recorded as the worker process's that it
-- does not hold (its start or claim took effect but the reply never reached it), once older than `grace_ms`: a
-- running one fails with `error`, a cancelled one finishes. Returns {how many it ended, how many unheld runs are
-- younger than the grace and left for a later look}.
local function st_orphans(keys, args)
  local session_key = keys[1]
  -- A session whose hash is gone (evicted) is lost, not for orphans to end: its leftovers are the sweep's.
  if not stored_inc then return { 0, 0 } end
  local base = base_of(session_key)
  local process, grace, error = args[1], tonumber(args[2]), args[3]
  local held = {}
  for index = 4, #args do held[args[index]] = true end
  local ended, young = 0, 0
  local current_ms = now_ms()
  for _, task_id in ipairs(redis.call('ZRANGE', base .. 'live', 0, -1)) do
    if not held[task_id] then
      local key = task_key(base, task_id)
      local run, since = unfinished_run_of(key, process)
      if run then
        if current_ms - since > grace then
          end_lost_run(base, key, task_id, run, error, now())
          ended = ended + 1
        else
          young = young + 1
        end
      end
    end
  end
  return { ended, young }
end

register('orphans', session_function(st_orphans))
