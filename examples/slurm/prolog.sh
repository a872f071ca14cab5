#!/bin/bash
# PrologSlurmctld: lease power for the job before it starts. A non-zero exit holds the job.
# Retries are safe: the Idempotency-Key makes a retried creation answer the same lease.
set -euo pipefail
URL=${COOLPLANE_URL:-http://127.0.0.1:8080}
TOKEN=${COOLPLANE_TOKEN:-$(cat /etc/coolplane/scheduler.token)}
# Slurm node names are coolplane node domains (e.g. hall-a-r001-n01); COOLPLANE_NODES overrides.
NODES=${COOLPLANE_NODES:-$(scontrol show hostnames "$SLURM_JOB_NODELIST")}
nodes_json=$(printf '%s\n' $NODES | sed 's/.*/{"node":"&"}/' | paste -sd, -)
body=$(printf '{"external_id":"%s","nodes":[%s],"min_w":%s,"request_w":%s,"priority":%s,"ttl_s":%s}' \
  "$SLURM_JOB_ID" "$nodes_json" "${COOLPLANE_MIN_W:-700}" "${COOLPLANE_REQUEST_W:-1000}" \
  "${COOLPLANE_PRIORITY:-0}" "${COOLPLANE_TTL_S:-600}")
curl -sS --fail-with-body --retry 5 --retry-all-errors --max-time 5 \
  -H "Authorization: Bearer $TOKEN" -H "Idempotency-Key: slurm-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}" \
  -H 'Content-Type: application/json' -d "$body" "$URL/v1/allocations"
