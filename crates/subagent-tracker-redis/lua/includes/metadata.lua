-- Inherited metadata (contract §5): a child that is not detached starts with its parent's metadata, updated with
-- its own. Both are JSON objects as text; the merge splits each into its members and copies every value's text as
-- it is, so that no number loses a digit and no empty list becomes an object (a decode and encode with cjson would
-- do both). It walks the text with a work list of its own, never recursing on how deep the values nest.

-- The position of the quote that closes the JSON string opening at `start`, or nil.
local function string_end(text, start)
  local position = start + 1
  while true do
    local found = string.find(text, '["\\]', position)
    if not found then return nil end
    if string.sub(text, found, found) == '"' then return found end
    position = found + 2
  end
end

-- The position of the last character of the JSON value that starts at `start` (a member's value, ended by a `,`
-- or the object's `}` at its own depth), or nil.
local function value_end(text, start)
  local depth = 0
  local position = start
  while true do
    local found = string.find(text, '[%[%]{}",]', position)
    if not found then return nil end
    local char = string.sub(text, found, found)
    if char == '"' then
      found = string_end(text, found)
      if not found then return nil end
    elseif char == '[' or char == '{' then
      depth = depth + 1
    elseif depth > 0 and (char == ']' or char == '}') then
      depth = depth - 1
    elseif depth == 0 and (char == ',' or char == '}' or char == ']') then
      local last = found - 1
      while last >= start and string.find(string.sub(text, last, last), '%s') do last = last - 1 end
      return last
    end
    position = found + 1
  end
end

-- The members of the JSON object `text` in order, each {key, value's text}, or nil when it is not an object.
local function object_members(text)
  local position = string.find(text, '%S')
  if not position or string.sub(text, position, position) ~= '{' then return nil end
  local members = {}
  position = string.find(text, '%S', position + 1)
  if position and string.sub(text, position, position) == '}' then return members end
  while position do
    if string.sub(text, position, position) ~= '"' then return nil end
    local key_end = string_end(text, position)
    if not key_end then return nil end
    local key = cjson.decode(string.sub(text, position, key_end))
    local colon = string.find(text, '%S', key_end + 1)
    if not colon or string.sub(text, colon, colon) ~= ':' then return nil end
    local start = string.find(text, '%S', colon + 1)
    local last = start and value_end(text, start)
    if not last or last < start then return nil end
    members[#members + 1] = { key, string.sub(text, start, last) }
    local after = string.find(text, '%S', last + 1)
    local char = after and string.sub(text, after, after)
    if char == '}' then return members end
    if char ~= ',' then return nil end
    position = string.find(text, '%S', after + 1)
  end
  return nil
end

-- A child's metadata: `inherited` (its parent's, "" for none) updated with `own` ("" for none). Metadata that is not
-- an object is not merged: the child keeps its own.
local function inherit_metadata(inherited, own)
  if inherited == '' then return own end
  if own == '' then return inherited end
  local merged, mine = object_members(inherited), object_members(own)
  if not merged or not mine then return own end
  local index_of = {}
  for index, member in ipairs(merged) do index_of[member[1]] = index end
  for _, member in ipairs(mine) do
    local index = index_of[member[1]]
    if index then
      merged[index] = member
    else
      merged[#merged + 1] = member
      index_of[member[1]] = #merged
    end
  end
  local parts = {}
  for index, member in ipairs(merged) do parts[index] = cjson.encode(member[1]) .. ':' .. member[2] end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- Equal JSON values, as cjson decodes them: numbers by value (1 is 1.0), objects and arrays member by member.
-- Metadata nests at most 64 deep (checked before it is stored), which bounds the recursion.
local function json_equal(left, right)
  if type(left) ~= 'table' or type(right) ~= 'table' then return left == right end
  for key, value in pairs(left) do
    if not json_equal(value, right[key]) then return false end
  end
  for key in pairs(right) do
    if left[key] == nil then return false end
  end
  return true
end

local function metadata_holds(stored, wanted)
  local metadata = stored and cjson.decode(stored) or {}
  if type(metadata) ~= 'table' then return false end
  for key, value in pairs(wanted) do
    if metadata[key] == nil or not json_equal(metadata[key], value) then return false end
  end
  return true
end

-- Whether a task (its agent and metadata, false for none) matches a filter's agent ("" or "=<agent>") and
-- metadata ("" or a JSON object) (contract §3, cancel by filter; the core's `TaskFilter`).
local function task_matches(agent, metadata, task_agent, task_metadata)
  return (agent == '' or (task_agent and agent == '=' .. task_agent))
    and (metadata == '' or metadata_holds(task_metadata, cjson.decode(metadata)))
end
