-- The server's clock, read once per function call (`register` forgets it between calls): a transition happens at
-- one instant, and each `TIME` is a call of its own. It is kept in the three forms the functions use, each made
-- once, because every conversion of the reply's digits is a `strtod` on the server's hot path.
local clock_us, clock_ms, clock_ms_digits, clock_text = nil, nil, nil, nil

local function read_clock()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  clock_us = seconds * 1000000 + micros
  clock_ms = seconds * 1000 + math.floor(micros / 1000)
  local fraction = string.rep('0', 6 - #time[2]) .. time[2]
  clock_ms_digits = time[1] .. string.sub(fraction, 1, 3)
  clock_text = time[1] .. '.' .. fraction
end

-- The time as tasks' fields hold it: seconds since the epoch with six decimals.
local function now()
  if not clock_us then read_clock() end
  return clock_text
end

local function now_ms()
  if not clock_us then read_clock() end
  return clock_ms
end

-- `now_ms()` as its decimal digits, as the session's hash keeps its time of last change.
local function now_ms_digits()
  if not clock_us then read_clock() end
  return clock_ms_digits
end

-- The clock in microseconds, exactly (a double holds every such count for thousands of years).
local function now_us()
  if not clock_us then read_clock() end
  return clock_us
end

-- A time as `now` writes it, in microseconds, read from its digits rather than through a fraction.
local function micros_of(time)
  local seconds, micros = string.match(time, '^(%d+)%.(%d+)$')
  return tonumber(seconds) * 1000000 + tonumber(micros)
end

-- A whole number as its decimal digits: Lua's own conversion writes numbers past 10^14 in exponent form.
local function digits(number) return string.format('%d', number) end
