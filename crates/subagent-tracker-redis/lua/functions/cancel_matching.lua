-- stv2_cancel_matching(session_key; inc, reason, agent, status, metadata, caller): cancels the pending tasks that
-- match every filter given, each as stv2_cancel would (cause "requested"), in one cascade that goes through the
-- live index in start order, in steps (contract §3, cancel by filter). A filter not given is ""; agent and status
-- are given as "=<value>", metadata as a JSON object whose every key a task's metadata must hold with an equal
-- JSON value. The rule is the core's `TaskFilter`. A task started after the call began is not among them.
-- Returns {walk, timer, told, id, ...}: the walk left under way, its timer and what it told `caller` (as
-- stv2_cancel's), and the ids of the matching tasks this step moved, in start order (one reached by an earlier
-- match's cascade included).
-- Includes: clock, session, cascade, register.
local function st_cancel_matching(keys, args)
  if not same_incarnation(args[1]) then return gone() end
  touch()
  tell_caller(args[6])
  local walk = start_walk(base_of(keys[1]), new_walk({ kind = 'match', reason = args[2], cause = 'requested',
    at = now(), cursor = '0', upto = stored_seq_digits, agent = args[3], status = args[4], metadata = args[5] }))
  return { walk.left or '', walk.due or '', told_caller(), unpack(walk.moved_roots) }
end

register('cancel_matching', session_function(st_cancel_matching))
