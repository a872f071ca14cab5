#!/bin/bash
# EpilogSlurmctld: release the job's leases; the caps of its GPUs revert at once.
set -uo pipefail
URL=${COOLPLANE_URL:-http://127.0.0.1:8080}
TOKEN=${COOLPLANE_TOKEN:-$(cat /etc/coolplane/scheduler.token)}
auth="Authorization: Bearer $TOKEN"
ids=$(curl -sS --max-time 5 -H "$auth" "$URL/v1/allocations?external_id=$SLURM_JOB_ID" |
  python3 -c 'import json,sys; print(*[a["id"] for a in json.load(sys.stdin)["items"] if a["state"] in ("active","preempting")])')
for id in $ids; do
  curl -sS --fail-with-body --retry 3 --max-time 5 -X DELETE -H "$auth" "$URL/v1/allocations/$id" > /dev/null
done
# A lease not released here still expires after its TTL, and its caps revert then.
