-- stv2_orphans(session_key; process, cursor): one page of the look for the runs recorded as the worker process's
-- (contract §21): at most ORPHAN_STEP tasks of the live index read, in start order, after `cursor` (the last run
-- read; "": from the first). Returns {the cursor of the next page, or "" once the index is done; then, for each
-- unfinished run of the process in the page, its task id, its run and how long ago, in milliseconds, the process
-- began it}. The process tells which it does not hold, and ends those with stv2_end_orphans.
-- Includes: clock, session, keys, liveness, register.
local ORPHAN_STEP = 200

local function st_orphans(keys, args)
  -- A session whose hash is gone (evicted) is lost, not for orphans to end: its leftovers are the sweep's.
  if not stored_inc then return { '' } end
  local base = base_of(keys[1])
  local process = args[1]
  local listed = redis.call('ZRANGE', base .. KEY.live, '(' .. (args[2] ~= '' and args[2] or '0'), '+inf', 'BYSCORE',
    'LIMIT', 0, ORPHAN_STEP, 'WITHSCORES')
  local page = { #listed < 2 * ORPHAN_STEP and '' or listed[#listed] }
  local current_ms = now_ms()
  for index = 1, #listed, 2 do
    local task_id = listed[index]
    local run, since = unfinished_run_of(task_key(base, task_id), process)
    if run then
      page[#page + 1] = task_id
      page[#page + 1] = run
      page[#page + 1] = tostring(math.floor(current_ms - since))
    end
  end
  return page
end

register('orphans', session_function(st_orphans), true)
