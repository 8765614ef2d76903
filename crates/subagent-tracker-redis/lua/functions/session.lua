-- stv2_session(session_key): {incarnation, closed ("1" or "0"), unfinished task count, max_finished}, or {} for no
-- session.
-- Includes: session_state, register.
local function st_session(keys)
  return session_state(keys[1])
end

register('session', st_session, true)
