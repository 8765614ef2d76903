local function register(name, callback, read_only)
  local flags = read_only and { 'no-writes' } or {}
  local function call(keys, args)
    clock_us = nil
    return callback(keys, args)
  end
  redis.register_function{ function_name = FUNCTION_PREFIX .. name, callback = call, flags = flags }
end
