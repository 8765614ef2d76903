local function timer(kind, task_id, run) return kind .. '\t' .. task_id .. '\t' .. run end

local function task_key(base, task_id) return base .. KEY.task .. task_id end
local function children_key(base, run) return base .. KEY.children .. run end

-- The channel of a worker process: the keys' prefix (everything before the session's hash tag) names it too.
local function channel_of(base, process)
  local prefix = string.match(base, '^(.-){')
  return prefix .. 'worker:' .. process
end
