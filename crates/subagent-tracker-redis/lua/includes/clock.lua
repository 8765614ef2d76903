-- The server's clock, read once per function call (`register` forgets it between calls): a transition happens at
-- one instant, and each `TIME` is a call of its own.
local clock = nil

local function read_clock()
  if not clock then clock = redis.call('TIME') end
  return clock
end

local function now()
  local time = read_clock()
  return string.format('%d.%06d', time[1], time[2])
end

local function now_ms()
  local time = read_clock()
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The clock in microseconds, exactly (a double holds every such count for thousands of years).
local function now_us()
  local time = read_clock()
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- A time as `now` writes it, in microseconds, read from its digits rather than through a fraction.
local function micros_of(time)
  local seconds, micros = string.match(time, '^(%d+)%.(%d+)$')
  return tonumber(seconds) * 1000000 + tonumber(micros)
end

-- A whole number as its decimal digits: Lua's own conversion writes numbers past 10^14 in exponent form.
local function digits(number) return string.format('%d', number) end
