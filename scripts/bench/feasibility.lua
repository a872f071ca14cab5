-- wrk script: POST /v1/feasibility for one node (4-8 GPUs at 900 W), cycling over the node names
-- in nodes.lua (written by budget-api.sh), each connection pausing DELAY_MS between requests so
-- that connections x 1000 / (DELAY_MS + latency) sets the offered rate.
local names = dofile(os.getenv("NODES_LUA") or "/tmp/coolplane-nodes.lua")
local token = os.getenv("TOKEN") or "bench-scheduler-token-0000"
local pause = tonumber(os.getenv("DELAY_MS") or "10")
local i = 0
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.headers["Content-Type"] = "application/json"

function request()
  i = i + 1
  local n = names[(i * 7919) % #names + 1]
  return wrk.format(nil, "/v1/feasibility", nil,
    '{"nodes":[{"node":"' .. n .. '"}],"min_w":700,"request_w":900}')
end

function delay()
  return pause
end

done = function(summary, latency, requests)
  io.write(string.format("requests %d, errors: status %d, connect %d, timeout %d\n", summary.requests,
    summary.errors.status, summary.errors.connect, summary.errors.timeout))
  for _, p in pairs({ 50, 90, 99, 99.9 }) do
    io.write(string.format("p%-5s %.3f ms\n", p, latency:percentile(p) / 1000.0))
  end
  io.write(string.format("rate %.0f req/s\n", summary.requests / (summary.duration / 1e6)))
end
