-- stv2_list(session_key; inc, which, cursor, limit): one page of the session's pending ("pending") or retained
-- ("all") tasks, at most `limit` of them read (contract §6, listings page through the server): {next cursor ("" once
-- the listing is done), then each task's fields as a flat list}. A pending listing goes through the live index in
-- start order (its cursor "<run>": the last run read); an "all" listing goes through the live index in start
-- order (cursor "l<run>"), then the finished list in the order runs finished (cursor "f<position>": the position,
-- counted since the session's first finish, of the next one to read: `fins` counts them, and eviction takes from
-- the list's front, so a position stays put). A task that finishes while a listing pages may come twice, and one
-- restarted may come twice or be left out: the caller keeps each id's last.
-- Includes: clock, session, tasks, register.
local function st_list(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local which, cursor, limit = args[2], args[3], tonumber(args[4])
  local page = { '' }
  local live_after = cursor
  if which == 'all' then live_after = string.match(cursor, '^l(%d+)$') or (cursor == '' and '0') or nil end
  if live_after then
    if live_after == '' then live_after = '0' end
    local listed = redis.call('ZRANGE', base .. KEY.live, '(' .. live_after, '+inf', 'BYSCORE', 'LIMIT', 0, limit,
      'WITHSCORES')
    for index = 1, #listed, 2 do
      local task = snapshot(base, listed[index])
      if #task > 0 and (which == 'all' or PENDING[field_of(task, 'status')]) then page[#page + 1] = task end
    end
    local read = #listed / 2
    if read == limit then
      page[1] = (which == 'all' and 'l' or '') .. listed[#listed]
      return page
    end
    if which == 'pending' then return page end
    limit = limit - read
    cursor = ''
  end
  local length = redis.call('LLEN', base .. KEY.finished)
  -- Never below 0, even where Redis lost the count but kept the list: a cursor always moves on.
  local first = math.max(stored_fins - length, 0)
  local position = tonumber(string.match(cursor, '^f(%d+)$') or first)
  local index = math.max(position - first, 0)
  local listed = redis.call('LRANGE', base .. KEY.finished, index, index + limit - 1)
  for _, task_id in ipairs(listed) do
    local task = snapshot(base, task_id)
    if #task > 0 and not is_aged(task) then page[#page + 1] = task end
  end
  if index + #listed < length then page[1] = 'f' .. digits(first + index + #listed) end
  return page
end

register('list', session_function(st_list), true)
