#!/usr/bin/env bash
# Feasibility latency of the budget API under load: campus-100k, 10,000 active leases, ~2,000
# requests/s from wrk for DURATION. Usage: scripts/bench/budget-api.sh [DURATION] [CONNECTIONS] [DELAY_MS]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${CARGO_TARGET_DIR:-target}/release/coolplane"
port=${PORT:-24080}
dur=${1:-60s}; conns=${2:-22}; delay=${3:-10}
"$bin" bench-api-server --site campus-100k --leases 10000 --listen "127.0.0.1:$port" --duration-s 900 > /tmp/coolplane-bench-api.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q serving /tmp/coolplane-bench-api.log && break; sleep 0.2; done
cat /tmp/coolplane-bench-api.log
auth="Authorization: Bearer bench-scheduler-token-0000"
curl -sS -H "$auth" "http://127.0.0.1:$port/v1/domains?kind=node&limit=1000&offset=5000" |
  python3 -c 'import json,sys; print("return {" + ",".join(json.dumps(d["name"]) for d in json.load(sys.stdin)["items"]) + "}")' > /tmp/coolplane-nodes.lua
curl -sS -H "$auth" "http://127.0.0.1:$port/metrics" | grep '^coolplane_budget_leases_active'
NODES_LUA=/tmp/coolplane-nodes.lua DELAY_MS=$delay wrk -t2 -c"$conns" -d"$dur" --latency \
  -s scripts/bench/feasibility.lua "http://127.0.0.1:$port"
grep -c "took" /tmp/coolplane-bench-api.log | sed 's/^/ledger ticks during the run: /'
