-- The rules of task groups, as the core's `settle_group` keeps them in memory (contract §3), for a task that has
-- just finished with `status` (completed or failed; nothing for a cancel). A failure of an attached child cancels
-- the parent it started under, if that is a group still pending (cause child_failed, the child as origin), and so
-- the group's other children; a group's own end cancels its pending descendants (cause parent, the group as
-- origin). Called before `finish`, with the status already written: the run is still retained then, with its
-- children's set, and the cascades it starts pass it over. `known` is the task's {parent, detached, structured,
-- parent_of} when the caller has read them; nil to read them here.
local GROUP_FIELDS = { 'parent', 'detached', 'structured', 'parent_of' }

local function settle_group(base, key, task_id, run, status, at, known)
  if status ~= 'failed' and status ~= 'completed' then return end
  local task = known or fields(key, unpack(GROUP_FIELDS))
  local parent_id, detached, structured, had_children = task[1], task[2], task[3], task[4]
  -- Its own children first: a failing group's children end by its end, not by its parent's cancel.
  if structured == '1' and had_children then
    cancel_children(base, run, GROUP_ENDED_REASON, 'parent', at, task_id)
  end
  if status == 'failed' and parent_id and detached ~= '1' then
    local parent = fields(task_key(base, parent_id), 'run', 'structured')
    -- The parent's current run is the one the child started under when it began before the child: a later run of
    -- the id began after that one finished, which was after the child's start.
    if parent[2] == '1' and tonumber(parent[1]) < tonumber(run) then
      cancel_trees(base, { parent_id }, CHILD_FAILED_REASON, 'child_failed', at, task_id)
    end
  end
end

-- Whether a task that ends with `status` ({parent, detached, structured, parent_of} in `task`) may start a group's
-- rule: most ends start none, and skip `settle_group` and its extra write.
local function may_settle_group(task, status)
  return (status == 'failed' and task[1] and task[2] ~= '1') or (task[3] == '1' and task[4])
end
