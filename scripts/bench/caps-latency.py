#!/usr/bin/env python3
"""Time from a limit drop to the new caps applied on the racks, over MQTT, in `coolplane demo`.

Leases four nodes of rack hall-a-r001 at 1,000 W per GPU, then repeatedly lowers the rack's limit
through the API (PUT /v1/domains/hall-a-r001/limit) and waits for the rack agent's answer on
`coolplane/v1/hall-10k/rack/hall-a-r001/power_limit` (what it applied, over MQTT, read with
mosquitto_sub) to carry the new grants. The wall time from just before the PUT to that answer,
times the demo's speed, is the plant time. Usage:
  coolplane demo --speed 10 --api-listen 127.0.0.1:24081 --mqtt-port 24883 ... &
  scripts/bench/caps-latency.py http://127.0.0.1:24081 24883 10 [repeats]
"""
import json, queue, subprocess, sys, threading, time, urllib.request
from datetime import datetime

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:24081"
MQTT_PORT = sys.argv[2] if len(sys.argv) > 2 else "24883"
SPEED = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
REPEATS = int(sys.argv[4]) if len(sys.argv) > 4 else 10
TOKEN = "demo-operator-token-change-me"

def call(method, path, body=None, key=None):
    req = urllib.request.Request(URL + path, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", "Bearer " + TOKEN)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())

def plant_now():
    return datetime.fromisoformat(call("GET", "/v1/forecast")["points"][0]["at"]).timestamp()

def wait_converged(ids, timeout_s=60):
    end = time.time() + timeout_s
    while time.time() < end:
        allocs = [call("GET", f"/v1/allocations/{i}") for i in ids]
        if all(all(c["applied_w"] is not None and abs(c["applied_w"] - a["granted_w"]) <= 1.0 for c in a["caps"]) for a in allocs):
            return allocs
        time.sleep(0.02)
    raise SystemExit(f"caps did not converge within {timeout_s} s: {allocs}")

for _ in range(300):
    try:
        urllib.request.urlopen(URL + "/readyz", timeout=2)
        break
    except Exception:
        time.sleep(0.2)
call("DELETE", "/v1/domains/hall-a-r001/limit")  # leftover of an earlier run
ids = []
for n in range(1, 5):  # leftovers of an earlier run
    for a in call("GET", f"/v1/allocations?external_id=bench-{n}")["items"]:
        if a["state"] in ("active", "preempting"):
            call("DELETE", f"/v1/allocations/{a['id']}")
for n in range(1, 5):
    a = call("POST", "/v1/allocations", {"external_id": f"bench-{n}", "nodes": [{"node": f"hall-a-r001-n0{n}"}],
             "min_w": 500, "request_w": 1000, "priority": n, "ttl_s": 3600}, key=f"bench-{n}-{time.time()}")
    ids.append(a["id"])
wait_converged(ids)
sub = subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", MQTT_PORT, "-t",
                        "coolplane/v1/hall-10k/rack/hall-a-r001/power_limit"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
answers = queue.Queue()
threading.Thread(target=lambda: [answers.put((time.time(), json.loads(l))) for l in sub.stdout], daemon=True).start()
time.sleep(0.5)

def wait_answer(ids, since):
    want = [a["granted_w"] for a in (call("GET", f"/v1/allocations/{i}") for i in ids)]
    while True:
        t, msg = answers.get(timeout=60)
        got = [msg["applied_w"][4 * k] for k in range(4)]
        # Within 1 W, or 1 % where the ledger has since moved a marginal grant with the rack's
        # measured load (it re-balances every tick; a tick may come between the PUT and the answer).
        if t >= since and all(abs(g - w) <= max(1.0, 0.01 * w) for g, w in zip(got, want)):
            return t, want

lat = []
for k in range(REPEATS):
    rack = call("GET", "/v1/domains/hall-a-r001")
    drop = 4 * 4 * 1.25 * 250.0  # 250 W per GPU off the four leases
    w0 = time.time()
    call("PUT", "/v1/domains/hall-a-r001/limit", {"watts": rack["load_w"] - drop, "expires_at": "2099-01-01T00:00:00Z",
         "reason": "caps latency benchmark"})
    t1, want = wait_answer(ids, w0)
    lat.append((t1 - w0) * SPEED)
    print(f"drop {k + 1}: grants {[round(w) for w in want]} W applied by the rack agent after "
          f"{(t1 - w0) * SPEED:.3f} s plant time ({(t1 - w0) * 1e3:.1f} ms wall)")
    w0 = time.time()
    call("DELETE", "/v1/domains/hall-a-r001/limit")
    wait_answer(ids, w0)
sub.terminate()
lat.sort()
print(f"limit drop -> caps applied on the racks: median {lat[len(lat) // 2]:.3f} s, max {lat[-1]:.3f} s "
      f"plant time over {len(lat)} drops (speed {SPEED}x)")
