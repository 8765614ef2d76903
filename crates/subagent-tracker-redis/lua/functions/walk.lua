-- stv2_walk(session_key; inc, walk, caller): takes the next step of a cascade that a call left under way (contract
-- §3 and §20: cascades proceed in steps), the walk named, or any of the session's ("": for a caller whose call may
-- have left several: an end's task groups). Returns {done ("1" once no step is left: of the walk named, or of
-- every walk of the session), how many this step moved, what it told the caller's worker process `caller` (as
-- stv2_cancel's), the ids of the matching tasks it moved (a cancel by filter)}.
-- Rust: RedisSession::finish_walk.
-- Includes: session, cascade, register.
local function st_walk(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  local base = base_of(keys[1])
  local walk_id = args[2]
  if walk_id == '' then
    walk_id = redis.call('SRANDMEMBER', base .. KEY.walks)
    if not walk_id then return { '1', '0', '' } end
  end
  touch()
  tell_caller(args[3])
  local walk, done = continue_walk(base, walk_id)
  if not walk then return { '1', '0', '' } end
  if args[2] == '' then done = redis.call('EXISTS', base .. KEY.walks) == 0 end
  return { done and '1' or '0', tostring(walk.moved), told_caller(), unpack(walk.moved_roots) }
end

register('walk', session_function(st_walk))
