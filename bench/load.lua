-- load.lua — wrk script for the tally benchmark (bench/run.sh). Not part of the test suite.
--
--   wrk -t1 -c64 -d12s --latency -s bench/load.lua URL -- SCENARIO TARGET OUT SEED [RATE]
--
-- SCENARIO  write | keyed | viral | viral_keyed | feed | mixed | toggle | paced (the write requests, RATE a
--           second) | paced_keyed (the keyed requests, RATE a second) |
--           who (a page of 20 of who reacted to an item, Zipf item, as an admin) |
--           mine (a page of 20 of a user's reactions, uniform user, as that user)
--           keyed: the writes of `write`, each with a fresh Idempotency-Key (as the peers store an
--           idempotency record for every write)
--           viral_keyed: the writes of `viral`, each with a fresh Idempotency-Key (one item's load with
--           the same per-write work as `keyed`: what bench/pg_shards.sh compares across shards)
-- TARGET    tally | nginx (nginx: same requests, no record of what was sent)
-- OUT       file prefix: OUT.result (one line of key=value) and, for tally writes,
--           OUT.pairs ("item user" for every write sent, for the correctness check)
-- SEED      integer; each wrk thread seeds its own generator from it
-- RATE      paced only: requests a second for each wrk thread, spread evenly over its connections
--           (a latency measured at a set rate, as an open-loop client would see it, not at saturation)
--
-- Distributions: users uniform over 1M ids (u0..u999999); items Zipf(s=1.1) over 1M ranks,
-- each rank mapped to an id by a fixed permutation (so hot items do not sit next to each
-- other in the store's key order); the viral item is "viral-1".

local USERS = 1000000
local ITEMS = 1000000
local ZIPF_S = 1.1
local PERM_A, PERM_B = 999983, 12345 -- rank -> id: (rank * A + B) mod ITEMS, a bijection
local VIRAL = "viral-1"
local FEED_PAGES = 1024              -- pre-built feed pages per thread (100 ids each)
local RING = 4096                    -- toggles remembered per thread for retries
local RETRY_MIN_AGE = 512            -- retry only keys sent at least this many requests ago

local threads = {}
local counter = 0

function setup(thread)
   counter = counter + 1
   thread:set("tid", counter)
   table.insert(threads, thread)
end

-- ---------------------------------------------------------------- per-thread state

local random = math.random
local floor = math.floor
local zipf_cdf, zipf_total
local scenario, target, seed
local host_hdr
local n_req = 0          -- request() calls
sent_list = {}           -- pair keys (item index * USERS + user index) of writes sent
local n_sent = 0
st = {}                  -- status -> count (global: read by done())
changed_true = 0         -- viral: answers with "changed":true
replayed = 0             -- toggle: answers with Idempotent-Replayed: true
retries = 0              -- toggle: requests that resend an earlier key
local ring = {}
local feed = {}
local write_bodies = {
   '{"reaction":"like"}', '{"reaction":"dislike"}', '{"reaction":"none"}',
}

local function build_zipf()
   zipf_cdf = {}
   local acc = 0
   for k = 1, ITEMS do
      acc = acc + k ^ (-ZIPF_S)
      zipf_cdf[k] = acc
   end
   zipf_total = acc
end

-- Zipf rank in 1..ITEMS by inversion (binary search on the cumulative table).
local function zipf_rank()
   local u = random() * zipf_total
   local lo, hi = 1, ITEMS
   while lo < hi do
      local mid = floor((lo + hi) / 2)
      if zipf_cdf[mid] < u then lo = mid + 1 else hi = mid end
   end
   return lo
end

local function item_index(rank) return (rank * PERM_A + PERM_B) % ITEMS end
local function user_index() return floor(random() * USERS) end

local function record(item_idx, user_idx)
   if target == "tally" then
      n_sent = n_sent + 1
      sent_list[n_sent] = item_idx * USERS + user_idx
   end
end

local function http(method, path, extra, body)
   local r = method .. " " .. path .. " HTTP/1.1\r\nHost: " .. host_hdr .. "\r\n" .. extra
   if body then
      r = r .. "Content-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
   else
      r = r .. "\r\n"
   end
   return r
end

local function pick_kind()
   local x = random()
   if x < 0.80 then return 1 elseif x < 0.95 then return 2 else return 3 end
end

local function write_req()
   local ii, ui = item_index(zipf_rank()), user_index()
   record(ii, ui)
   return http("PUT", "/v1/items/p" .. ii .. "/reaction", "X-User-Id: u" .. ui .. "\r\n",
               write_bodies[pick_kind()])
end

local function keyed_req()
   local ii, ui = item_index(zipf_rank()), user_index()
   record(ii, ui)
   return http("PUT", "/v1/items/p" .. ii .. "/reaction",
               "X-User-Id: u" .. ui .. "\r\nIdempotency-Key: w" .. seed .. "-" .. tid .. "-" .. n_req .. "\r\n",
               write_bodies[pick_kind()])
end

local function viral_req()
   local ui = user_index()
   record(-1, ui)
   return http("PUT", "/v1/items/" .. VIRAL .. "/reaction", "X-User-Id: u" .. ui .. "\r\n",
               write_bodies[1])
end

local function viral_keyed_req()
   local ui = user_index()
   record(-1, ui)
   return http("PUT", "/v1/items/" .. VIRAL .. "/reaction",
               "X-User-Id: u" .. ui .. "\r\nIdempotency-Key: v" .. seed .. "-" .. tid .. "-" .. n_req .. "\r\n",
               write_bodies[1])
end

local function read_req()
   local ii = item_index(zipf_rank())
   return http("GET", "/v1/items/p" .. ii, "X-User-Id: u" .. user_index() .. "\r\n")
end

local function who_req()
   return http("GET", "/v1/items/p" .. item_index(zipf_rank()) .. "/reactions?limit=20", "X-User-Id: admin\r\n")
end

local function mine_req()
   local u = "u" .. user_index()
   return http("GET", "/v1/users/" .. u .. "/reactions?limit=20", "X-User-Id: " .. u .. "\r\n")
end

local function toggle_req()
   if n_req > RETRY_MIN_AGE * 2 and random() < 0.2 then
      -- resend an earlier request: same user, item, key and body
      local back = RETRY_MIN_AGE + floor(random() * (math.min(RING, n_req) - RETRY_MIN_AGE))
      local r = ring[(n_req - back) % RING]
      if r then
         retries = retries + 1
         return r
      end
   end
   local ii, ui = item_index(zipf_rank()), user_index()
   record(ii, ui)
   local key = "k" .. seed .. "-" .. tid .. "-" .. n_req
   local r = http("POST", "/v1/items/p" .. ii .. "/reaction:toggle",
                  "X-User-Id: u" .. ui .. "\r\nIdempotency-Key: " .. key .. "\r\n", write_bodies[1])
   ring[n_req % RING] = r
   return r
end

local function build_feed()
   for p = 1, FEED_PAGES do
      local seen, ids, n = {}, {}, 0
      while n < 100 do
         local ii = item_index(zipf_rank())
         if not seen[ii] then
            seen[ii] = true
            n = n + 1
            ids[n] = "p" .. ii
         end
      end
      feed[p] = http("GET", "/v1/items?ids=" .. table.concat(ids, ","),
                     "X-User-Id: u" .. user_index() .. "\r\n")
   end
end

-- Pacing: the next request of the thread is due every 1000/RATE ms; a connection that finishes early
-- waits for the next slot (wrk's delay() is in whole ms, so sends come in 1 ms ticks). A thread
-- that falls behind does not burst to catch up by more than 10 ms of requests.
local function monotonic_ms_fn()
   local ffi = require("ffi")
   ffi.cdef [[ typedef struct { long tv_sec; long tv_nsec; } tally_bench_ts;
               int clock_gettime(int clk, tally_bench_ts *ts); ]]
   local ts = ffi.new("tally_bench_ts")
   return function()
      ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
      return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
   end
end

local function start_pacing(rate)
   local now_ms = monotonic_ms_fn()
   local interval = 1000 / rate
   local next_at = now_ms()
   function delay() -- global: wrk looks for it after init()
      local t = now_ms()
      if next_at < t - 10 then next_at = t - 10 end
      local d = next_at - t
      next_at = next_at + interval
      return d > 0 and floor(d + 0.5) or 0
   end
end

function init(args)
   scenario, target, seed = args[1], args[2], tonumber(args[4] or "1")
   if scenario == "paced" or scenario == "paced_keyed" then
      local rate = tonumber(args[5] or "")
      if not rate or rate <= 0 then error("paced needs RATE (requests a second per thread)") end
      start_pacing(rate)
   end
   scenario_name, out_prefix = scenario, args[3]
   record_pairs = target == "tally" and scenario ~= "feed" and scenario ~= "who" and scenario ~= "mine"
   math.randomseed(seed * 1000 + tid)
   host_hdr = wrk.host .. ":" .. tostring(wrk.port)
   build_zipf()
   if scenario == "feed" then build_feed() end
end

function request()
   n_req = n_req + 1
   if scenario == "write" or scenario == "paced" then
      return write_req()
   elseif scenario == "keyed" or scenario == "paced_keyed" then
      return keyed_req()
   elseif scenario == "viral" then
      return viral_req()
   elseif scenario == "viral_keyed" then
      return viral_keyed_req()
   elseif scenario == "feed" then
      return feed[(n_req - 1) % FEED_PAGES + 1]
   elseif scenario == "mixed" then
      if random() < 0.1 then return write_req() end
      return read_req()
   elseif scenario == "toggle" then
      return toggle_req()
   elseif scenario == "who" then
      return who_req()
   elseif scenario == "mine" then
      return mine_req()
   end
   error("unknown scenario " .. tostring(scenario))
end

function response(status, headers, body)
   st[status] = (st[status] or 0) + 1
   if scenario == "viral" or scenario == "viral_keyed" then
      if body and body:find('"changed":true', 1, true) then changed_true = changed_true + 1 end
   elseif scenario == "toggle" then
      if headers["idempotent-replayed"] == "true" or headers["Idempotent-Replayed"] == "true" then
         replayed = replayed + 1
      end
   end
end

-- ---------------------------------------------------------------- main state: the summary

function done(summary, latency, requests)
   local out
   local statuses, non2xx, total = {}, 0, 0
   local ct, rp, rt = 0, 0, 0
   for _, t in ipairs(threads) do
      local s = t:get("st") or {}
      for code, n in pairs(s) do
         statuses[code] = (statuses[code] or 0) + n
         total = total + n
         if code < 200 or code > 299 then non2xx = non2xx + n end
      end
      ct = ct + (t:get("changed_true") or 0)
      rp = rp + (t:get("replayed") or 0)
      rt = rt + (t:get("retries") or 0)
   end
   out = threads[1]:get("out_prefix")
   local codes = {}
   for code, n in pairs(statuses) do codes[#codes + 1] = code .. ":" .. n end
   table.sort(codes)
   local e = summary.errors
   local secs = summary.duration / 1e6
   local line = string.format(
      "rps=%.1f requests=%d secs=%.2f p50_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%.0f " ..
      "non2xx=%d sock_errors=%d connect=%d read=%d write=%d timeout=%d statuses=%s " ..
      "changed_true=%d replayed=%d retries=%d",
      summary.requests / secs, summary.requests, secs,
      latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max,
      latency.mean, non2xx, e.connect + e.read + e.write + e.timeout,
      e.connect, e.read, e.write, e.timeout, table.concat(codes, ","), ct, rp, rt)
   print("RESULT " .. line)
   if out then
      local f = assert(io.open(out .. ".result", "w"))
      f:write(line, "\n")
      f:close()
      if threads[1]:get("record_pairs") then
         local pf = assert(io.open(out .. ".pairs", "w"))
         for _, t in ipairs(threads) do
            local list = t:get("sent_list") or {}
            for i = 1, #list do
               local k = list[i]
               local ii = floor(k / USERS)
               local ui = k - ii * USERS
               if ii < 0 then
                  pf:write(VIRAL, " u", ui, "\n")
               else
                  pf:write("p", ii, " u", ui, "\n")
               end
            end
         end
         pf:close()
      end
   end
end
