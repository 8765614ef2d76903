-- Whole numbers are written as their digits without a `string.format` each: a count that goes on by one (run
-- numbers, event numbers) is kept as the digits above its last six and its last six as a number, and written
-- with two lookups in this table. Lua's own conversion writes numbers past 10^14 in exponent form, and every
-- `string.format` on the server's hot path is a `sprintf`. Made by the first call that reads the clock: the
-- library's own code, as Redis loads it, cannot reach `string`.
local THREE_DIGITS = nil

-- A whole number as its decimal digits.
local function digits(number) return string.format('%d', number) end

-- The digits of a count above its last six, and its last six as a number.
local function split_count(text)
  if #text <= 6 then return '', tonumber(text) end
  return string.sub(text, 1, -7), tonumber(string.sub(text, -6))
end

-- The digits of the count `high` (digits above the last six) and `low` (the last six).
local function count_text(high, low)
  if high == '' then return digits(low) end
  return high .. THREE_DIGITS[math.floor(low / 1000)] .. THREE_DIGITS[low % 1000]
end

-- The count after `high`, `low`.
local function count_on(high, low)
  if low < 999999 then return high, low + 1 end
  return digits((tonumber(high) or 0) + 1), 0
end

-- The server's clock, read once per function call (`register` forgets it between calls): a transition happens at
-- one instant, and each `TIME` is a call of its own. It is kept in the forms the functions use, each made once:
-- in microseconds as a number and as a count's two parts, in milliseconds as a number and as digits, and as
-- tasks' fields hold it.
local clock_us, clock_seconds_digits, clock_micros = nil, nil, nil
local clock_ms, clock_ms_digits, clock_text = nil, nil, nil

local function read_clock()
  if not THREE_DIGITS then
    THREE_DIGITS = {}
    for number = 0, 999 do THREE_DIGITS[number] = string.format('%03d', number) end
  end
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  clock_us = seconds * 1000000 + micros
  clock_seconds_digits, clock_micros = time[1], micros
  clock_ms = seconds * 1000 + math.floor(micros / 1000)
  local fraction = THREE_DIGITS[math.floor(micros / 1000)] .. THREE_DIGITS[micros % 1000]
  clock_ms_digits = time[1] .. THREE_DIGITS[math.floor(micros / 1000)]
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

-- The clock in microseconds as a count's two parts (`count_text`).
local function now_us_count()
  if not clock_us then read_clock() end
  return clock_seconds_digits, clock_micros
end
