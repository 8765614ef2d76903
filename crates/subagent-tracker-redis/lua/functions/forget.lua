-- stv2_forget(workers_key, announced_key; process): drops a reaped worker process's lease and what it announced,
-- unless it renewed meanwhile (it came back). Both keys are registry-wide, in one slot.
-- Includes: clock, register.
local function st_forget(keys, args)
  local expiry = tonumber(redis.call('ZSCORE', keys[1], args[1]))
  if expiry and expiry <= now_ms() then
    redis.call('DEL', keys[2])
    return redis.call('ZREM', keys[1], args[1])
  end
  return 0
end

register('forget', st_forget)
