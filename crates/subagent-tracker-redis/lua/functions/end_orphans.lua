-- stv2_end_orphans(session_key; process, grace_ms, error, then task id and run per run): ends the runs named that
-- are still unfinished, still the worker process's, and older than `grace_ms` (their start or claim took effect
-- but the reply never reached the process: stv2_orphans found them, and the process holds none of them): a
-- running one fails with `error`, a cancelled one finishes. Returns how many it ended, and when a cascade its ends
-- set off and left under way is due (`walks_due`). Worker::end_orphans.
-- Includes: clock, session, keys, cascade, liveness, register.
local function st_end_orphans(keys, args)
  if not stored_inc then return { 0, '' } end
  local base = base_of(keys[1])
  local process, grace, error = args[1], tonumber(args[2]), args[3]
  local ended = 0
  local current_ms = now_ms()
  for index = 4, #args, 2 do
    local task_id, named_run = args[index], args[index + 1]
    local key = task_key(base, task_id)
    local run, since = unfinished_run_of(key, process)
    if run == named_run and current_ms - since > grace then
      end_lost_run(base, key, task_id, run, error, now())
      ended = ended + 1
    end
  end
  return { ended, walks_due() }
end

register('end_orphans', session_function(st_end_orphans))
