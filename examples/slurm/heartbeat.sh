#!/bin/bash
# Job heartbeat: run in the background of the batch script (`heartbeat.sh &`). Renews the job's
# lease every COOLPLANE_RENEW_S; when the job dies the renewals stop and the lease expires.
URL=${COOLPLANE_URL:-http://127.0.0.1:8080}
TOKEN=${COOLPLANE_TOKEN:-$(cat /etc/coolplane/scheduler.token)}
auth="Authorization: Bearer $TOKEN"
while sleep "${COOLPLANE_RENEW_S:-120}"; do
  for id in $(curl -sS --max-time 5 -H "$auth" "$URL/v1/allocations?external_id=$SLURM_JOB_ID" |
    python3 -c 'import json,sys; print(*[a["id"] for a in json.load(sys.stdin)["items"] if a["state"]=="active"])'); do
    curl -sS --max-time 5 -X POST -H "$auth" "$URL/v1/allocations/$id/renew" > /dev/null || true
  done
done
